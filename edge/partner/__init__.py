"""Shared parts of the partner routes (/v1 UGC and AI, Ad Manager, sandbox, legacy):
body validation, geo signals, the key-and-rate door, rendering, OpenAPI schemas."""

from edge.partner.bodies import AiBody, DisablePair, UgcBody, parse_ai, parse_ugc
from edge.partner.guard import Admission, admit, rate_limits
from edge.partner.render import ai_body, legacy_ad, ugc_body

__all__ = [
    "Admission",
    "AiBody",
    "DisablePair",
    "UgcBody",
    "admit",
    "ai_body",
    "legacy_ad",
    "parse_ai",
    "parse_ugc",
    "rate_limits",
    "ugc_body",
]
