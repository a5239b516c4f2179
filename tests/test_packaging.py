"""``make dist``: a wheel carries every data file the edge reads at start-up, the exemplars
built by ``make install`` among them, and ``tools/check_wheel.py`` refuses one that does not."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from matcher.safety import EXEMPLAR_FILE, MODEL_FILE

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "tools" / "check_wheel.py"
EXEMPLARS = f"matcher/data/{EXEMPLAR_FILE}"


def check(wheel: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), str(wheel)], capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # What `make dist` runs after `make install` (which built the exemplars for this run).
    out = tmp_path_factory.mktemp("dist")
    left = not (ROOT / "build").exists()  # setuptools builds in the tree: tidy up after it
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "--no-deps", "-w", str(out), str(ROOT)],
        check=True, capture_output=True, cwd=out,
    )  # fmt: skip
    if left:
        shutil.rmtree(ROOT / "build", ignore_errors=True)
    (built,) = out.glob("*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_carries_the_exemplars_and_every_data_file(wheel: Path):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    needed = {EXEMPLARS, f"matcher/data/{MODEL_FILE}", "matcher/data/minilm_tokenizer.json"}
    assert needed <= names
    done = check(wheel)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_a_wheel_without_the_exemplars_is_refused_by_name(wheel: Path, tmp_path: Path):
    # A wheel built from a fresh checkout, before `make install`: everything but the file.
    bare = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(bare, "w") as dst:
        for item in src.infolist():
            if item.filename != EXEMPLARS:
                dst.writestr(item, src.read(item))
    done = check(bare)
    assert done.returncode == 1
    assert f"missing {EXEMPLARS}" in done.stderr
    assert "make dist" in done.stderr
