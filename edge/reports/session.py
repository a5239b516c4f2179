"""The /reports sign-in: an Ad Manager key, typed once into a form, buys a session cookie.

The cookie holds no key: only the key's id and an expiry, sealed with the edge's signing
key (``Signer.seal``, purpose ``reports-session``), so it is worthless on another edge or
after ``SESSION_SECONDS``. It is ``HttpOnly`` (no script can read it), ``SameSite=Strict``
(no other site's page or form sends it), scoped to ``/reports``, and ``Secure`` when the edge
is reached over HTTPS. Each page load checks the key again: revoking it ends its sessions.
"""

from __future__ import annotations

from typing import Any

from edge.signing import Signer

COOKIE = "edge_reports"
PURPOSE = "reports-session"
SESSION_SECONDS = 12 * 3600
COOKIE_PATH = "/reports"


def seal(signer: Signer, key_id: str, now: float) -> str:
    return signer.seal(PURPOSE, {"k": key_id, "exp": int(now + SESSION_SECONDS)})


def key_id_of(signer: Signer, token: str | None, now: float) -> str | None:
    """The key id of a sealed, unexpired session, else None."""
    if not token:
        return None
    payload: dict[str, Any] | None = signer.unseal(PURPOSE, token)
    if payload is None:
        return None
    key_id, expires = payload.get("k"), payload.get("exp")
    if not isinstance(key_id, str) or not isinstance(expires, int) or expires <= now:
        return None
    return key_id


def set_cookie(value: str, *, secure: bool) -> str:
    return _cookie(value, SESSION_SECONDS, secure)


def clear_cookie(*, secure: bool) -> str:
    return _cookie("", 0, secure)


def _cookie(value: str, max_age: int, secure: bool) -> str:
    parts = [f"{COOKIE}={value}", f"Path={COOKIE_PATH}", f"Max-Age={max_age}", "HttpOnly",
             "SameSite=Strict"]  # fmt: skip
    if secure:
        parts.append("Secure")
    return "; ".join(parts)
