"""The /reports sign-in: an Ad Manager key, typed once into a form, buys a session cookie.

The cookie holds no key: only the key's id, a random session id and an expiry, sealed with
the edge's signing key (``Signer.seal``, purpose ``reports-session``), so it is worthless on
another edge or after ``SESSION_SECONDS``. It is ``HttpOnly`` (no script can read it),
``SameSite=Strict`` (no other site's page or form sends it), scoped to ``/reports``, and
``Secure`` when the edge is reached over HTTPS. Each page load checks the key again: revoking
it ends its sessions. Signing out ends the session itself: its id is stored as ended until
it would have expired, so a copy of the cookie taken before is refused too.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from edge.signing import Signer

COOKIE = "edge_reports"
PURPOSE = "reports-session"
SESSION_SECONDS = 12 * 3600
COOKIE_PATH = "/reports"


@dataclass(frozen=True, slots=True)
class Session:
    key_id: str
    session_id: str
    expires_at: int


def seal(signer: Signer, key_id: str, now: float) -> str:
    session_id = secrets.token_urlsafe(16)
    return signer.seal(PURPOSE, {"k": key_id, "s": session_id, "exp": int(now + SESSION_SECONDS)})


def unseal(signer: Signer, token: str | None, now: float) -> Session | None:
    """The session of a sealed, unexpired cookie, else None. (A cookie sealed before
    sessions had ids could not be ended by signing out: it is refused, and one sign-in
    replaces it.)"""
    if not token:
        return None
    payload: dict[str, Any] | None = signer.unseal(PURPOSE, token)
    if payload is None:
        return None
    key_id, session_id, expires = payload.get("k"), payload.get("s"), payload.get("exp")
    if (
        not isinstance(key_id, str)
        or not isinstance(session_id, str)
        or not isinstance(expires, int)
        or expires <= now
    ):
        return None
    return Session(key_id, session_id, expires)


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
