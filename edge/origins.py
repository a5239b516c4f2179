"""A web origin in the one form browsers send in ``Origin``: what publishers register and
what the tag routes compare by string.

The host of a registered origin is stored the way a browser serialises it (WHATWG URL host
parsing, https://url.spec.whatwg.org/#host-parsing): lower case, an internationalised name
in its ASCII (IDNA, ``xn--``) form, so ``https://bücher.example`` is kept as
``https://xn--bcher-kva.example``. A host no browser could send (a space, a ``*``
wildcard, an empty label) is refused, since it would never match.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

import idna

# An ASCII host label as browsers accept it: letters, digits, '-' and '_' (they do not apply
# the stricter hostname rules: "my_host" and "r3---sn" are sent as they are).
_LABEL = re.compile(r"[a-z0-9_-]{1,63}")
_MAX_HOST = 253


def normalise_origin(text: str) -> str:
    """``scheme://host[:port]`` as browsers send it in ``Origin``; ValueError otherwise.

    Lower-cased, an internationalised host in IDNA form, the default port dropped, a
    trailing ``/`` tolerated; a path, query, fragment or credentials are refused (an origin
    has none), and so is a host that is not one (a space, a wildcard).
    """
    raw = text.strip()
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError:
        raise ValueError(f"not an origin: {text!r}") from None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if scheme not in ("http", "https") or not host:
        raise ValueError(f"an origin is http(s)://host[:port], got {text!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError(f"an origin has no path, query or credentials, got {text!r}")
    host = _host(host, text)
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def _host(host: str, text: str) -> str:
    if ":" in host:  # IPv6 literal, from inside its brackets
        try:
            return f"[{ipaddress.IPv6Address(host).compressed}]"
        except ValueError:
            raise ValueError(f"not an IPv6 address in {text!r}") from None
    if not host.isascii():
        try:
            # UTS 46 non-transitional, as browsers map a name (ß stays ß, "。" is a dot).
            host = idna.uts46_remap(host, std3_rules=False, transitional=False)
            host = ".".join(
                label if label.isascii() else idna.alabel(label).decode()
                for label in host.split(".")
            )
        except idna.IDNAError as exc:
            raise ValueError(f"not an internationalised host name in {text!r}: {exc}") from None
    if len(host) > _MAX_HOST or not all(_LABEL.fullmatch(label) for label in host.split(".")):
        raise ValueError(
            "an origin's host is labels of letters, digits, '-' and '_' joined by dots "
            f"(no space, no '*' wildcard: register each host), got {text!r}"
        )
    return host
