"""The QA kit as a QA engineer meets it: a fresh virtual environment outside this repository,
``pip install '<the wheel or source>[qa]'`` (no dev extra), and docs/qa.md's example files, copied
verbatim, run against a page with two ads above the fold and one below."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from e2e.catalogue import catalogue
from edge.qa import free_port

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "qa.md").read_text()
NOT_SOURCE = (".git", ".venv", "var", "build", "dist", "node_modules", "*.egg-info", "__pycache__",
              ".*_cache")  # fmt: skip

PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Trail running and a skillet dinner</title>
  <script async src="{edge}/dea/tag.js" data-publisher="my-site"></script>
  <style>
    .top {{ display: flex; gap: 16px; }} .top > div {{ width: 600px; min-height: 120px; }}
    .spacer {{ height: 2400px; }}
  </style>
</head>
<body>
  <div class="top">
    <div data-ad-slot="top"></div>
    <div data-ad-slot="sidebar"></div>
  </div>
  <main>
    <h1>Training for your first trail ultramarathon</h1>
    <p>Trail running asks more of your ankles than road running. Build your weekly long run
    on rocky, muddy trails and pick trail running shoes with lugged soles that grip on wet
    roots. After the run, heat a cast iron skillet until it smokes and sear a steak: cooking
    at home with cast iron gives a steakhouse crust.</p>
  </main>
  <div class="spacer"></div>
  <article data-ugc-post-id="c-1">
    <p>Our dog will not touch his kibble any more. Has anyone tried fresh dog food for a
    picky eater dog?</p>
    <div data-ad-slot="comments"></div>
  </article>
</body>
</html>
"""


def doc_block(start: str) -> str:
    """The python block of docs/qa.md that begins with ``start``."""
    blocks = re.findall(r"```python\n(.*?)```", DOC, flags=re.S)
    found = [b for b in blocks if b.startswith(start)]
    assert len(found) == 1, f"docs/qa.md has no single block starting {start!r}"
    return found[0]


@pytest.mark.slow
def test_the_documented_example_passes_in_a_fresh_venv_with_the_qa_extra(tmp_path: Path) -> None:
    assert REPO not in tmp_path.parents
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    clean = {k: v for k, v in clean.items() if not k.startswith("EDGE_")}
    # Built from a copy: building in place would leave build/ in the checkout. The local
    # wheel cache and mirrors pip is configured with serve the dependencies.
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"{source}[qa]"],
        capture_output=True, text=True, timeout=900, env=clean, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-4000:]
    where = subprocess.run(
        [str(python), "-c", "import edge, pytest_playwright; print(edge.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, env=clean, check=True,
    ).stdout.strip()  # fmt: skip
    assert where.startswith(str(env_dir)), where  # the installed package, not this checkout
    dev_only = subprocess.run(
        [str(python), "-c", "import schemathesis"], capture_output=True, env=clean, check=False
    )
    assert dev_only.returncode != 0  # the kit did not need the dev extra

    suite = tmp_path / "suite"
    site = tmp_path / "site" / "articles" / "trail-running"
    site.mkdir(parents=True)
    suite.mkdir()
    page_port, edge_port = free_port(), free_port()
    origin = f"http://127.0.0.1:{page_port}"
    (site / "index.html").write_text(PAGE.format(edge=f"http://127.0.0.1:{edge_port}"))
    (suite / "ads.json").write_text(json.dumps(catalogue(origin)))
    (suite / "test_article_ads.py").write_text(doc_block("# test_article_ads.py"))
    (suite / "conftest.py").write_text(doc_block("# conftest.py"))
    pages = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(page_port), "--bind", "127.0.0.1",
         "--directory", str(tmp_path / "site")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        run = subprocess.run(
            [str(env_dir / "bin" / "pytest"), "-q", "-p", "no:cacheprovider",
             "--base-url", origin, "--edge-port", str(edge_port),
             f"--edge-publisher=my-site={origin}", "--edge-catalogue", "ads.json"],
            cwd=suite, capture_output=True, text=True, timeout=600, env=clean, check=False,
        )  # fmt: skip
    finally:
        pages.terminate()
        pages.wait(timeout=10)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "3 passed" in out, out[-6000:]
