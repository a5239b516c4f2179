"""The browser tag: JS helpers in ``src/``, the builder, and the demo publisher page."""

from tag.builder import BUDGET_BROTLI_BYTES, TAG_VERSION, TagBuild, build_stylesheet, build_tag

__all__ = ["BUDGET_BROTLI_BYTES", "TAG_VERSION", "TagBuild", "build_stylesheet", "build_tag"]
