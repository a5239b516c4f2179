"""Character rules shared by every id the edge takes from outside (partner bodies, /dea
payloads, Ad Manager queries)."""

from __future__ import annotations

import unicodedata

# Control (Cc), format (Cf: the invisible ones such as U+200B), surrogate (Cs) and line or
# paragraph separator characters. Private-use and unassigned code points are not among
# them: they are visible (a glyph or a box), and the rule is also published as a pattern
# (edge.partner.declare.IDENT) that must stay short enough to read and to generate from.
REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def control_character(text: str) -> str | None:
    """The first control, format or line-separator character of ``text``, else None.

    Ids are refused with one: a newline or an invisible character makes two ids that look
    alike (and once let a signed URL be re-split into several dedupe keys).
    """
    for ch in text:
        if unicodedata.category(ch) in REFUSED_CATEGORIES:
            return ch
    return None
