"""The project's docs stand alone: every file or path a doc names is in the repository, and
neither docs nor code cite design papers a user does not have."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", *(ROOT / "docs").glob("*.md")])
# Top-level entries a repository path starts with; anything else (var/, .venv/, /dea/...) is
# a runtime path or a route, not a file of this repository.
TOP = sorted(p.name for p in ROOT.iterdir() if not p.name.startswith(".") and p.name != "var")
CITATION = re.compile(r"\b(SPEC|DESIGN|RECIPES)\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\s]+)`")
# Text files of the project (not data sets): where a citation could hide.
TEXT = {".py", ".md", ".js", ".mjs", ".sql", ".toml", ".j2", ".css", ".html", ".cfg", ".txt"}
SKIP_DIRS = {".git", ".venv", "var", "build", "dist", "node_modules", "__pycache__"}
# Texts a past release shipped, kept byte for byte as test data (an upgrade test builds its
# database with them): not the project's own words, so not checked for citations.
VERBATIM = {"tests/data/first_release"}


def doc_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def repo_path(token: str) -> str | None:
    """``token`` as a path inside the repository when it names one, else None."""
    token = token.split("#", 1)[0].split("::", 1)[0].rstrip(".,:;")
    head = token.split("/", 1)[0]
    if head not in TOP or any(c in token for c in "*{}<>$="):
        return None
    if any(part in SKIP_DIRS for part in token.split("/")):
        return None  # made by an install (tools/eslint/node_modules), not kept in the repository
    if "/" not in token and "." not in token:
        return None  # a bare word such as `edge` or `tag`: a command or package, not a path
    return token


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_linked_file_exists(doc: Path) -> None:
    text = doc.read_text()
    missing = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{doc_id(doc)} links to files that are not in the repository: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_every_named_repository_path_exists(doc: Path) -> None:
    named = {p for token in CODE.findall(doc.read_text()) if (p := repo_path(token))}
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{doc_id(doc)} names paths that are not in the repository: {missing}"


def project_text_files() -> list[Path]:
    out = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        skipped = (p in SKIP_DIRS or p.endswith((".egg-info", "_cache")) for p in rel.parts)
        if any(skipped) or rel.parent.as_posix() in VERBATIM:
            continue
        if path.is_file() and path.suffix in TEXT:
            out.append(path)
    return sorted(out)


def test_no_doc_or_code_cites_papers_users_do_not_have() -> None:
    cited = [
        f"{doc_id(path)}:{n}: {line.strip()[:100]}"
        for path in project_text_files()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if CITATION.search(line) and path != Path(__file__).resolve()
    ]
    assert not cited, (
        "state the rule itself or link a doc of this repository instead of citing SPEC, "
        "DESIGN or RECIPES:\n" + "\n".join(cited)
    )


def test_the_checks_see_a_missing_path() -> None:
    # The checks above would pass vacuously if the patterns matched nothing.
    assert repo_path("docs/nope.md") == "docs/nope.md"
    assert repo_path("var/edge.db") is None and repo_path("/dea/tag.js") is None
    assert repo_path("tools/eslint/node_modules") is None
    assert CITATION.search("as SPEC 4.2 says") and not CITATION.search("the spec says")
