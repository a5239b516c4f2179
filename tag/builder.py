"""Builds the browser tag: render the config blob, join the helpers, minify, precompress, hash.

The JavaScript in ``src/`` is static, lintable code; the only generated part is the config
blob (``src/config.js.j2``). The debug build is the same code plus ``src/debug.js`` and the
``dbg(...)`` lines, which the normal build drops. ``build_tag`` is pure and deterministic: the same
sources and config give the same bytes, the same ETag and the same SRI hash, so the edge
builds it once at start-up and every instance of a deployment serves identical files.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import brotli
import jinja2
import rjsmin

from tag.mangle import mangle

SRC = Path(__file__).parent / "src"
# Order matters: later helpers use the earlier ones; main.js starts the tag.
SOURCES = ("util.js", "transport.js", "viewability.js", "render.js", "slots.js", "main.js")
# The debug build (/dea/tag.debug.js) adds this file, which defines dbg(), and keeps the
# dbg(...) lines; the normal build has neither, so logging costs it no byte.
DEBUG_SOURCE = "debug.js"
_DEBUG_LINE = re.compile(r"^[ \t]*dbg\(.*\);[ \t]*\n", re.MULTILINE)

TAG_VERSION = "1.0.0"
BUDGET_BROTLI_BYTES = 2560  # 2.5 KiB brotli: the tag is paid for on every page view
# The tag inlines the edge's base URL (EDGE_PUBLIC_BASE_URL), so its size depends on it: the
# budget holds for a base URL of up to BUDGET_ORIGIN_CHARS characters, each character over
# costs about a byte brotli. The test checks the budget at each of these (docs/decisions.md).
BUDGET_ORIGIN_CHARS = 64
BUDGET_ORIGINS = (
    "http://127.0.0.1:8000",  # the default: http://EDGE_HOST:EDGE_PORT
    "https://ads-edge-01.eu-west-1.publisher-network.example.com:8443",  # the longest covered
)

# MRC viewable impression for display ads: 50% of the pixels in view for one continuous
# second; 30% for large ads (242,500 px² and up, e.g. 970x250), as Prebid's
# modules/bidViewabilityIO.js applies the MRC guideline.
MRC_VISIBLE_RATIO = 0.5
MRC_LARGE_AD_VISIBLE_RATIO = 0.3
MRC_LARGE_AD_AREA_PX = 242_500
MRC_VISIBLE_MS = 1000
HOVER_DWELL_MS = 500  # pointer on the ad this long before the hover signal is sent


@dataclass(frozen=True, slots=True)
class TagBuild:
    """One built tag: the files the edge serves and how to name and pin them."""

    version: str  # TAG_VERSION plus a digest of sources and config: names the exact bytes
    js: bytes  # minified, the identity representation
    br: bytes
    gzip: bytes
    sri: str  # "sha384-...", for <script integrity=...>
    digest: str  # hex SHA-256 of ``js``, the base of the strong ETags

    @classmethod
    def of(cls, version: str, js: bytes) -> TagBuild:
        """Name, precompress and hash built bytes (also those of an earlier version, kept
        by the edge for pinned pages)."""
        return cls(
            version=version,
            js=js,
            br=brotli.compress(js, quality=11, mode=brotli.MODE_TEXT),
            gzip=gzip.compress(js, compresslevel=9, mtime=0),
            sri="sha384-" + base64.b64encode(hashlib.sha384(js).digest()).decode(),
            digest=hashlib.sha256(js).hexdigest(),
        )

    def sizes(self) -> dict[str, int]:
        return {"raw": len(self.js), "gzip": len(self.gzip), "br": len(self.br)}


def _strip_debug(body: str) -> str:
    body = _DEBUG_LINE.sub("", body)
    if "dbg(" in body:  # a dbg call not on a line of its own would be left calling nothing
        raise ValueError("dbg(...) must be a statement on its own line in tag/src")
    return body


def js_number(value: float) -> str:
    """The shortest JavaScript literal of a number: ``.5`` for 0.5, ``1e3`` for 1000."""
    text = json.dumps(value)
    forms = [text, text.removeprefix("0") if text.startswith("0.") else text]
    if isinstance(value, int) and value and not value % 10:
        digits = text.rstrip("0")
        forms.append(f"{digits}e{len(text) - len(digits)}")
    return min(forms, key=len)


@cache
def _sources(debug: bool) -> tuple[str, jinja2.Template]:
    body = "\n".join((SRC / name).read_text() for name in SOURCES)
    body = (SRC / DEBUG_SOURCE).read_text() + "\n" + body if debug else _strip_debug(body)
    env = jinja2.Environment(autoescape=False, keep_trailing_newline=True)  # noqa: S701 (JS, not HTML; tojson escapes)
    env.filters["number"] = js_number
    return body, env.from_string((SRC / "config.js.j2").read_text())


def tag_config(origin: str, publisher: str | None = None) -> dict[str, Any]:
    """The config blob without its version (the version is derived from it)."""
    return {
        "origin": origin.rstrip("/"),
        "publisher": publisher,
        "viewability": {
            "ratio": MRC_VISIBLE_RATIO,
            "large_ratio": MRC_LARGE_AD_VISIBLE_RATIO,
            "large_area": MRC_LARGE_AD_AREA_PX,
            "ms": MRC_VISIBLE_MS,
        },
        "hover_ms": HOVER_DWELL_MS,
    }


def _render(config: dict[str, Any], debug: bool = False) -> bytes:
    body, template = _sources(debug)
    source = f"(() => {{\n{template.render(config=config)}{body}}})();\n"
    return mangle(rjsmin.jsmin(source)).encode()


def lint_source() -> str:
    """What ``make lint`` gives ESLint: the joined tag (one scope, as it runs in a browser,
    so a name used in one file and declared in another is checked), each file marked."""
    _, template = _sources(True)
    config = {**tag_config("https://edge.example"), "version": TAG_VERSION}
    parts = [f"// ---- src/config.js.j2 ----\n{template.render(config=config)}"]
    names = (DEBUG_SOURCE, *SOURCES)
    parts += [f"// ---- src/{name} ----\n{(SRC / name).read_text()}" for name in names]
    return "(() => {\n" + "\n".join(parts) + "})();\n"


STYLESHEET = Path(__file__).parent / "tag.css"


def build_stylesheet() -> TagBuild:
    """The optional default stylesheet (``/dea/tag.css``), named, precompressed and hashed
    like the tag (its version is ``css-`` and a digest of the bytes; ``js`` holds the CSS)."""
    css = STYLESHEET.read_bytes()
    return TagBuild.of(f"css-{hashlib.sha256(css).hexdigest()[:10]}", css)


def build_tag(origin: str, publisher: str | None = None, *, debug: bool = False) -> TagBuild:
    """The tag for an edge reachable at ``origin``; ``publisher`` pins a default publisher id
    (normally null: the embedding script's ``data-publisher`` names it). ``debug``: the
    build that logs each decision to the console, under the normal build's version."""
    config = tag_config(origin, publisher)
    # The version names the output of everything else (sources, config, minifier), so a
    # pinned URL (tag.<version>.js) and its integrity hash always name the same bytes.
    draft = _render({**config, "version": ""})
    config["version"] = f"{TAG_VERSION}-{hashlib.sha256(draft).hexdigest()[:10]}"
    return TagBuild.of(config["version"], _render(config, debug))
