"""``python tools/check_wheel.py WHEEL``: refuse a wheel of the edge that lacks a data file.

The edge reads its data from the installed package at start-up: the brand-safety model and
exemplars, the tokenizer, the tag's sources, the bundled geo database, SQL. One of them is
built, not kept in git: the exemplar file (``make install`` builds it), so a wheel built from
a fresh checkout would install cleanly and then fail at the first start. This compares the
wheel with the package data of the checkout it was built from and names what is missing.
Exit status 0 when nothing is, 1 when something is.
"""

from __future__ import annotations

import sys
import tomllib
import zipfile
from fnmatch import fnmatch
from pathlib import Path

from matcher.safety import EXEMPLAR_FILE

ROOT = Path(__file__).resolve().parents[1]
# Built by ``make install`` rather than kept in git: required even when the checkout lacks it.
BUILT = (f"matcher/data/{EXEMPLAR_FILE}",)


def package_data(root: Path) -> set[str]:
    """Every file of the checkout that pyproject.toml's package data puts in a wheel."""
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = [p.rstrip("*") for p in config["packages"]["find"]["include"]]
    patterns = config["package-data"]["*"]
    found = set()
    for top in packages:
        for path in (root / top).rglob("*"):
            rel = path.relative_to(root).as_posix()
            if (
                path.is_file()
                and "__pycache__" not in rel
                and any(fnmatch(path.name, p) for p in patterns)
            ):
                found.add(rel)
    return found


def missing(wheel: Path, root: Path = ROOT) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    return sorted((package_data(root) | set(BUILT)) - names)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tools/check_wheel.py WHEEL", file=sys.stderr)
        return 2
    lost = missing(Path(argv[0]))
    for name in lost:
        print(f"{argv[0]}: missing {name}", file=sys.stderr)
    if lost:
        print("build the wheel with `make dist` (it builds the exemplars first)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
