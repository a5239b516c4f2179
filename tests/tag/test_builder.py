"""The tag builder: budget, determinism, versioning, SRI, the config blob (tag/builder.py)."""

import base64
import gzip
import hashlib
import re
import shutil
import subprocess

import brotli
import pytest

from tag import BUDGET_BROTLI_BYTES, build_tag
from tag import builder as tb

ORIGIN = "https://edge.example"


@pytest.fixture(scope="module")
def build():
    return build_tag(ORIGIN)


@pytest.mark.parametrize("origin", tb.BUDGET_ORIGINS)
def test_brotli_size_is_within_the_budget(origin):
    # The base URL is inlined: the budget is checked at the default local address and at the
    # longest base URL it covers, not at a short example host.
    sizes = build_tag(origin).sizes()
    assert sizes["br"] <= BUDGET_BROTLI_BYTES == 2560, (origin, sizes)
    # Realistic: far smaller than the source, and each encoding smaller than the last.
    assert sizes["br"] < sizes["gzip"] < sizes["raw"]


def test_the_budget_covers_the_default_and_a_long_production_base_url():
    assert "http://127.0.0.1:8000" in tb.BUDGET_ORIGINS  # EDGE_PUBLIC_BASE_URL left empty
    longest = max(tb.BUDGET_ORIGINS, key=len)
    assert longest.startswith("https://") and len(longest) == tb.BUDGET_ORIGIN_CHARS == 64
    # The longer the base URL, the bigger the tag: the longest one is the worst case.
    assert build_tag(longest).sizes()["br"] >= build_tag("https://edge.example").sizes()["br"]


def test_debug_build_logs_and_the_normal_build_carries_none_of_it(build):
    debug = build_tag(ORIGIN, debug=True)
    assert debug.version == build.version  # the same tag, logging: not a version of its own
    normal, logged = build.js.decode(), debug.js.decode()
    assert "console" not in normal and "[edge-tag]" not in normal
    assert "console.info" in logged and "[edge-tag] " in logged
    for decision in ('"slot"', '"request"', '"answer"', '"beacon"', '"beacon resent"'):
        assert decision in logged and decision not in normal, decision
    # The normal tag loads the debug build (same origin) only when the page asks for it.
    assert '"/dea/tag.debug.js"' in normal and "edge_debug=1" in normal
    assert len(debug.br) > len(build.br)


def test_a_dbg_call_not_on_its_own_line_fails_the_build():
    assert tb._strip_debug('  dbg("x", 1);\nkeep();\n') == "keep();\n"
    with pytest.raises(ValueError, match="own line"):
        tb._strip_debug("x && dbg(1);\n")


def test_stylesheet_is_named_and_hashed():
    css = tb.build_stylesheet()
    assert css.js == tb.STYLESHEET.read_bytes() and css.version.startswith("css-")
    assert b".edge-ad__cta" in css.js and b"data-edge-state" in css.js


def test_encodings_decode_to_the_identity_bytes(build):
    assert brotli.decompress(build.br) == build.js
    assert gzip.decompress(build.gzip) == build.js


def test_sri_is_sha384_of_the_served_bytes(build):
    expected = base64.b64encode(hashlib.sha384(build.js).digest()).decode()
    assert build.sri == f"sha384-{expected}"
    assert build.digest == hashlib.sha256(build.js).hexdigest()


def test_build_is_deterministic(build):
    again = build_tag(ORIGIN)
    assert (again.js, again.br, again.gzip, again.version) == (
        build.js,
        build.br,
        build.gzip,
        build.version,
    )


def test_version_names_the_bytes(build):
    other = build_tag("https://other.example")
    assert other.version != build.version and other.js != build.js
    assert re.fullmatch(rf"{re.escape(tb.TAG_VERSION)}-[0-9a-f]{{10}}", build.version)
    assert len(build.version) <= 32  # docs/dea-api.md: the `v` field's limit


def test_config_blob_carries_origin_version_publisher_and_mrc_thresholds(build):
    js = build.js.decode()
    assert f'"{ORIGIN}"' in js and f'"{build.version}"' in js
    # Written as the shortest JavaScript literal (.5, 1e3), they are still these numbers.
    numbers = {float(n) for n in re.findall(r"=\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)[,;]", js)}
    assert {0.5, 0.3, 242500, 1000, tb.HOVER_DWELL_MS} <= numbers
    pinned = build_tag(ORIGIN, publisher="pub-7").js.decode()
    assert '"pub-7"' in pinned and '"pub-7"' not in js


@pytest.mark.parametrize(
    ("value", "literal"),
    [(0.5, ".5"), (0.3, ".3"), (1000, "1e3"), (242_500, "242500"), (500, "500"), (0, "0")],
)
def test_numbers_are_written_as_their_shortest_literal(value, literal):
    assert tb.js_number(value) == literal


def test_mrc_constants_are_the_published_rule():
    assert tb.MRC_VISIBLE_RATIO == 0.5 and tb.MRC_VISIBLE_MS == 1000
    assert tb.MRC_LARGE_AD_VISIBLE_RATIO == 0.3 and tb.MRC_LARGE_AD_AREA_PX == 242_500


def test_config_values_are_escaped_for_a_script(build):
    hostile = build_tag("https://edge.example", publisher="</script><b>'x'").js.decode()
    assert "</script>" not in hostile and "<b>" not in hostile


def test_tag_has_no_eval_inner_html_or_inline_style():
    source = "\n".join((tb.SRC / name).read_text() for name in tb.SOURCES)
    code = re.sub(r"//[^\n]*", "", source)  # comments may name what the code avoids
    for banned in ("eval(", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                   "new Function", ".style", "setAttribute(\"style\""):  # fmt: skip
        assert banned not in code, banned


def test_sources_are_all_part_of_the_build():
    on_disk = {p.name for p in tb.SRC.glob("*.js")}
    assert on_disk == {*tb.SOURCES, tb.DEBUG_SOURCE}


def node_check(tmp_path, name: str, source: bytes) -> subprocess.CompletedProcess[str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the machines and CI have Node 20)")
    path = tmp_path / name
    path.write_bytes(source)
    return subprocess.run([node, "--check", str(path)], capture_output=True, text=True)


@pytest.mark.parametrize(("publisher", "debug"), [(None, False), ("pub-1", False), (None, True)])
def test_the_built_tag_parses_in_node(tmp_path, publisher, debug):
    # The renamer works on tokens without scope analysis: a slip shows up as a syntax error.
    checked = node_check(tmp_path, "tag.js", build_tag(ORIGIN, publisher, debug=debug).js)
    assert checked.returncode == 0, checked.stderr


def test_node_check_catches_a_broken_build(tmp_path, monkeypatch):
    # A renamer slip of the kind the check is for: one arrow turned into an assignment.
    monkeypatch.setattr(tb, "mangle", lambda js: js.replace("=>", "=", 1))
    assert node_check(tmp_path, "broken.js", build_tag(ORIGIN).js).returncode != 0


def test_lint_source_is_the_tag_before_minifying(tmp_path):
    source = tb.lint_source()
    for name in tb.SOURCES:
        assert f"// ---- src/{name} ----" in source
    checked = node_check(tmp_path, "lint.js", source.encode())
    assert checked.returncode == 0, checked.stderr
