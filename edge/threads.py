"""Scoped thread keys: whose post or conversation the matcher's state belongs to.

Partners and publishers name their posts and conversations themselves, so two of them can
send the same id ("1", "post-7"). Every id the edge hands the matcher for its state
(disables, frequency, no-match windows) is first scoped here by who sent it, so one
partner's post never suppresses, caps or backs off another's, and a UGC post never touches
an AI conversation of the same name:

- a partner's (``/v1``, sandbox and earlier routes): ``<product>:<key family>:<id>``; the
  key family (``KeyRecord.family``) outlives a rotation, so a rotated key keeps its state;
- a publisher's (the tag's ``/dea`` slots): ``tag:<publisher id>:<id>``; a post's no-match
  window there is its post's and its text's (``publisher_window``).

Neither a product, a key family (``key_<hex>``) nor a publisher id (``A-Z a-z 0-9 _ . -``)
holds a colon, so two scoped keys are equal only when all three parts are.

What a partner is handed back to fire (the AI beacon URLs) is scoped the same way, by
``partner_scope``: a short keyed hash of the product and key family; a rotated key keeps it.
It is what the URLs' dedupe keys hold, so it is made with the signer's ``names`` key, which
a rotation of the signing key leaves alone: a message served again after a rotation gets
URLs of the scope its first URLs had, and its impression still counts once. The same URLs
also carry the key family itself, signed (``edge.beacons``), for the report row their events
count for: an id that authenticates nothing (only the operator's CLI acts on it), as
``edge report`` prints it.
"""

from __future__ import annotations

import hashlib

from edge.signing import Signer
from edge.store import KeyRecord

SCOPE_PURPOSE = "partner-scope/v1"
SCOPE_CHARS = 12  # 72 bits of the keyed hash: no two key families meet, short in a URL
WINDOW_HASH_CHARS = 32  # 128 bits of a text's SHA-256


def partner_thread(product: str, key: KeyRecord, thread_id: str) -> str:
    """A partner's post or conversation id, scoped to its key family and product."""
    return f"{product}:{key.family}:{thread_id}"


def publisher_thread(publisher_id: str, thread_id: str) -> str:
    """A post id (or page URL) from a publisher's page, scoped to that publisher."""
    return f"tag:{publisher_id}:{thread_id}"


def publisher_window(publisher_id: str, post_id: str, text: str) -> str:
    """The no-match window of a publisher's post as the tag sent it: its post id and a hash
    of its text. Anyone can send a tag request with any text under a post id read from the
    page; keyed by the post alone, a stranger's unsafe or meaningless text would hold the
    post's real text without ads for up to a day. The hash (fixed-length hex) comes first,
    so no post id can spell another post's key."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:WINDOW_HASH_CHARS]
    return f"tag:{publisher_id}:text-{digest}:{post_id}"


def partner_scope(signer: Signer, product: str, key: KeyRecord) -> str:
    """The partner's public, stable name in what it is handed to fire (``A-Z a-z 0-9 _ -``,
    ``SCOPE_CHARS`` long): the same for a key and every key that replaced it, and across
    rotations of the edge's signing key."""
    return signer.names.sign(SCOPE_PURPOSE, product, key.family)[:SCOPE_CHARS]
