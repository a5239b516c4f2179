"""The one settings object: built once from command-line flags and ``EDGE_*`` variables.

Precedence is flag, then environment variable, then default. Every setting has a default
and a one-line help (the README's settings table is checked against this list by a test).
Bad values fail at start-up with the variable named, never later.
"""

from __future__ import annotations

import argparse
import difflib
import ipaddress
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

Env = Literal["production", "sandbox"]
TokenForm = Literal["binary", "json"]
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names the variable."""


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``requests`` per ``period_seconds``, which is also the burst a key may spend at once."""

    requests: int
    period_seconds: float

    @property
    def per_second(self) -> float:
        return self.requests / self.period_seconds

    def __str__(self) -> str:
        return f"{self.requests}/{self.period_seconds:g}s"


# A tag click per client address must be allowed by each of these (industry practice against
# click fraud: a reader clicks an ad now and then, a script clicks it all day).
CLICK_LIMITS = (
    RateLimit(1, 60.0),
    RateLimit(3, 600.0),
    RateLimit(10, 3600.0),
    RateLimit(25, 86400.0),
)


# -- parsers: text -> typed value, raising ValueError with a human message ------------------

_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in {"1", "true", "yes", "on"}:
        return True
    if low in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected 1/0, true/false, yes/no or on/off, got {text!r}")


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            if not re.fullmatch(r"-?[0-9]+", text.strip()):
                raise ValueError(text)
            value = int(text)
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
        if not lo <= value <= hi:
            raise ValueError(f"expected an integer from {lo} to {hi}, got {value}")
        return value

    return parse


def _choice(*options: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {text!r}")
        return text

    return parse


def _host(text: str) -> str:
    # An empty value (a templated env file left blank) would listen on every interface and
    # put http://:PORT into the tag and beacon URLs.
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # an IPv6 address as URLs write it
    if not host or any(c.isspace() for c in host):
        raise ValueError(
            f"expected an address to listen on, such as 127.0.0.1, ::1 or 0.0.0.0 "
            f"(every interface), got {text!r}"
        )
    return host


def _optional_path(text: str) -> Path | None:
    return Path(text) if text else None


def _url(text: str) -> str | None:
    if not text:
        return None
    if not re.fullmatch(r"https?://[^/\s?#]+(/[^\s?#]*)?", text):
        raise ValueError(f"expected an http(s) URL with no query, got {text!r}")
    return text.rstrip("/")


def _networks(text: str) -> tuple[IPNetwork, ...]:
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            out.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"expected comma-separated IPs or CIDRs, got {part!r}") from None
    return tuple(out)


def _rate_limit(text: str) -> RateLimit:
    # The period's number is optional (20/s), but a lone "." is not one.
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+\.?\d*|\.\d+)?\s*([smh])\s*", text, re.ASCII)
    if not m or int(m.group(1)) < 1:
        raise ValueError(f"expected REQUESTS/PERIOD such as 20/s, 600/60s or 1000/h, got {text!r}")
    count = float(m.group(2)) if m.group(2) else 1.0
    if count <= 0:
        raise ValueError(f"the period must be positive, got {text!r}")
    return RateLimit(int(m.group(1)), count * _PERIODS[m.group(3)])


def _rate_limits(text: str) -> tuple[RateLimit, ...]:
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError("expected one or more REQUESTS/PERIOD separated by commas, e.g. 1/m,3/10m")
    return tuple(_rate_limit(p) for p in parts)


def _database(text: str) -> Path | str:
    if text.startswith(("postgresql://", "postgres://")):
        return text
    if "://" in text:
        raise ValueError(f"expected a SQLite file path or a postgresql:// URL, got {text!r}")
    if not text:
        raise ValueError("expected a SQLite file path or a postgresql:// URL")
    return Path(text)


# What a refused secret's error tells the operator to run.
_HOW_TO_MAKE_A_KEY = "make one with: openssl rand -base64 48"
# The marker of the example env file's values, which an operator replaces.
_PLACEHOLDER = "change-me"
_MIN_SECRET_CHARS = 32
# Random hex or base64 text of 32 characters or more shows at least this many different
# ones: a 32-digit hex key (16 symbols) has fewer about once in 30 million, base64 never.
_MIN_DIFFERENT_CHARS = 8


def _secret(text: str) -> str | None:
    """A signing secret, or None (empty: the edge makes one and keeps it in the database).
    The example's placeholder and text that is obviously not random are refused: anyone
    who guesses the key can sign tokens and URLs that bill."""
    if not text:
        return None
    if _PLACEHOLDER in text.lower():
        raise ValueError(
            f"this is the example's placeholder (it holds CHANGE-ME), not a secret; "
            f"{_HOW_TO_MAKE_A_KEY}"
        )
    if len(text) < _MIN_SECRET_CHARS:
        raise ValueError(
            f"expected at least {_MIN_SECRET_CHARS} characters of secret text; {_HOW_TO_MAKE_A_KEY}"
        )
    flaw = _not_random(text)
    if flaw:
        raise ValueError(f"expected random text, but this key {flaw}; {_HOW_TO_MAKE_A_KEY}")
    return text


def _not_random(text: str) -> str | None:
    """Why ``text`` is obviously not random (never quoting it), else None. Each rule refuses
    a random hex or base64 key of 32 characters or more far less than once in a million."""
    if len(set(text)) < _MIN_DIFFERENT_CHARS:
        return f"uses fewer than {_MIN_DIFFERENT_CHARS} different characters"
    # A piece repeated at least twice ("0123456789abcdef" * 2): the text equals itself
    # shifted by the piece's length.
    if any(text[size:] == text[:-size] for size in range(1, len(text) // 2 + 1)):
        return "repeats a shorter piece"
    if 2 * max(map(text.count, set(text))) > len(text):
        return "is mostly one character"
    return None


def _setting(default: Any, help: str, parse: Callable[[str], Any], *, secret: bool = False) -> Any:
    return field(
        default=default,
        repr=not secret,
        metadata={"help": help, "parse": parse, "secret": secret},
    )


@dataclass(frozen=True, slots=True)
class Settings:
    env: Env = _setting(
        "production",
        "Environment this process serves: production or sandbox (one per process).",
        _choice("production", "sandbox"),
    )
    host: str = _setting("127.0.0.1", "Address to listen on.", _host)
    port: int = _setting(8000, "TCP port to listen on.", _int_in(1, 65535))
    db: Path | str = _setting(
        Path("var/edge.db"),
        "SQLite database file (created with its folder if missing), or a postgresql:// URL "
        "shared by several edge nodes.",
        _database,
    )
    catalogue: Path | None = _setting(
        None,
        "Catalogue JSON of live demand (production only); empty: the bundled sandbox catalogue. "
        "A catalogue stored with `edge catalogue load` wins over it (a start-up warning names "
        "both when they differ).",
        _optional_path,
    )
    geoip_db: Path | None = _setting(
        None,
        "MaxMind-format .mmdb for the US-only geofence; empty means the bundled test database.",
        _optional_path,
    )
    public_base_url: str | None = _setting(
        None,
        "Public URL of this edge, used in beacon URLs and the tag; empty means http://HOST:PORT.",
        _url,
    )
    trusted_proxies: tuple[IPNetwork, ...] = _setting(
        (),
        "Comma-separated IPs/CIDRs of proxies whose X-Forwarded-For hops are believed.",
        _networks,
    )
    allow_private_ips: bool = _setting(
        False,
        "Let loopback and private addresses through the production geofence (demo, tests).",
        _parse_bool,
    )
    legacy_api: bool = _setting(
        False,
        "Serve the earlier-described unprefixed endpoints (/ugc/process, /keys/apiKey, ...).",
        _parse_bool,
    )
    signing_key: str | None = _setting(
        None,
        "Random secret (32+ chars; `openssl rand -base64 48` makes one) that signs beacon URLs "
        "and impression tokens; empty: kept in the db.",
        _secret,
        secret=True,
    )
    signing_key_previous: str | None = _setting(
        None,
        "The signing key being retired during a rotation: what it signed is still accepted, "
        "nothing new is signed with it; empty: none (see docs/deploy.md).",
        _secret,
        secret=True,
    )
    rate_limit_ugc: RateLimit = _setting(
        RateLimit(50, 1.0), "Per-key request rate for the UGC product, e.g. 50/s.", _rate_limit
    )
    rate_limit_ai: RateLimit = _setting(
        RateLimit(50, 1.0), "Per-key request rate for the AI product, e.g. 50/s.", _rate_limit
    )
    rate_limit_ad_manager: RateLimit = _setting(
        RateLimit(10, 1.0), "Per-key request rate for Ad Manager, e.g. 10/s.", _rate_limit
    )
    match_timeout_ms: int = _setting(
        2000, "Deadline for one matcher call; past it the caller gets 502.", _int_in(10, 60_000)
    )
    max_body_bytes: int = _setting(
        262_144, "Largest request body accepted, in bytes (413 above).", _int_in(1024, 16 << 20)
    )
    max_ads: int = _setting(
        3,
        "Most ads returned for one match (past the first, only ads nearly as relevant as it).",
        _int_in(1, 20),
    )
    key_cache_seconds: int = _setting(
        5,
        "How long a verified key (or a partner key family's liveness) is trusted before the "
        "store is asked again.",
        _int_in(0, 3600),
    )
    estimates_refresh_seconds: int = _setting(
        60,
        "How often click-through estimates are rebuilt from the stored counts (their staleness).",
        _int_in(1, 3600),
    )
    explore: bool = _setting(
        True,
        "Production ranks on a draw from each CTR estimate (Thompson sampling), not the mean.",
        _parse_bool,
    )
    model_threads: int = _setting(
        1, "onnxruntime intra-op threads of the embedding model.", _int_in(1, 64)
    )
    match_batch: int = _setting(
        1,
        "Most texts of partner matches queued while the model is busy that share one forward "
        "pass; 1: one pass per match.",
        _int_in(1, 32),
    )
    cache_dir: Path = _setting(
        Path("var/cache"), "Folder for derived files such as catalogue embedding caches.", Path
    )
    dma_table: Path | None = _setting(
        None,
        "County-to-DMA CSV with the columns state,county,dma (a three-digit DMA code; others,"
        " like the bundled table's dma_name, are ignored); empty means the bundled small table.",
        _optional_path,
    )
    log_level: str = _setting(
        "info",
        "Log level: debug, info, warning or error.",
        _choice("debug", "info", "warning", "error"),
    )
    access_log: bool = _setting(True, "Log one line per request (never keys).", _parse_bool)
    ivt_impressions: RateLimit = _setting(
        RateLimit(60, 300.0),
        "Valid tag impressions per client address; more are recorded as invalid, e.g. 60/5m.",
        _rate_limit,
    )
    ivt_clicks: tuple[RateLimit, ...] = _setting(
        CLICK_LIMITS,
        "Valid tag clicks per client address: each of these comma-separated rates must allow a "
        "click, and one over any of them is recorded as invalid (rate_limited), e.g. 1/m,3/10m.",
        _rate_limits,
    )
    dea_client_rate: RateLimit = _setting(
        RateLimit(60, 60.0),
        "Tag match requests (/dea/url/keywords, /placements) per client address; 429 above.",
        _rate_limit,
    )
    dea_client_text_rate: RateLimit = _setting(
        RateLimit(600_000, 60.0),
        "Characters of text per client address that the tag's match routes send to the model, "
        "e.g. 600000/1m; 429 above. A request never needs more than the whole budget; pages "
        "answered from the page cache do not count.",
        _rate_limit,
    )
    dea_publisher_rate: RateLimit = _setting(
        RateLimit(200, 1.0),
        "Tag match requests per publisher id, e.g. 200/s; 429 above.",
        _rate_limit,
    )
    failure_client_rate: RateLimit = _setting(
        RateLimit(10, 60.0),
        "Placement-failure reports per client address, e.g. 10/1m; 429 above.",
        _rate_limit,
    )
    page_cache_seconds: int = _setting(
        60,
        "How long a page's match is reused for its next visitors (0: not at all).",
        _int_in(0, 3600),
    )
    tag_match_slots: int = _setting(
        2,
        "Tag match requests matched at once at most; past it a /dea match request waits up to 1 s "
        "for one to end, then is answered 503.",
        _int_in(1, 64),
    )
    tag_retention_days: int = _setting(
        180,
        "Days an earlier tag version stays served at its pinned URL once a newer one is built.",
        _int_in(0, 3650),
    )
    workers: int = _setting(
        1,
        "Worker processes sharing the port on this machine, each a whole edge on the same store.",
        _int_in(1, 64),
    )
    catalogue_history: int = _setting(
        10,
        "Catalogue versions kept besides the live one; `edge catalogue load` and `restore` "
        "delete older ones.",
        _int_in(0, 10_000),
    )
    conversion_window_days: int = _setting(
        30,
        "Days after its click a conversion is attributed to it; a later report is refused "
        "(422 conversion_window_closed) and bills nothing.",
        _int_in(1, 365),
    )
    max_connections: int = _setting(
        1000,
        "Open connections and requests in progress at most; past it new requests get 503.",
        _int_in(1, 1_000_000),
    )
    max_client_connections: int = _setting(
        128,
        "Open connections from one client address at most (EDGE_TRUSTED_PROXIES excepted); "
        "past it a new connection from that address is closed at once.",
        _int_in(1, 1_000_000),
    )
    keep_alive_seconds: int = _setting(
        5, "How long an idle keep-alive connection is kept open between requests.", _int_in(1, 300)
    )
    header_timeout_seconds: int = _setting(
        10,
        "Time a client has from connecting (or starting a request) to the end of its headers.",
        _int_in(1, 300),
    )
    body_timeout_seconds: int = _setting(
        20,
        "Time a client has from the end of a request's headers to the end of its body, and,"
        " each time the edge's writes to it pause, to take enough of its answers for them"
        " to resume.",
        _int_in(1, 300),
    )
    max_header_bytes: int = _setting(
        16_384,
        "Largest request line plus headers, in bytes (431 above).",
        _int_in(1024, 1 << 20),
    )
    token_form: TokenForm = _setting(
        "binary",
        "Impression token form issued: binary, or json while a node of an earlier release "
        "still serves (every node reads both).",
        _choice("binary", "json"),
    )

    # -- derived values --------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """Where browsers and partners reach this edge."""
        host = f"[{self.host}]" if ":" in self.host else self.host  # IPv6: bracketed in URLs
        return self.public_base_url or f"http://{host}:{self.port}"

    @property
    def is_production(self) -> bool:
        return self.env == "production"

    @property
    def key_env_prefix(self) -> str:
        return "prod" if self.is_production else "sandbox"

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def unknown_variables(cls, environ: Mapping[str, str]) -> list[str]:
        """One warning per ``EDGE_*`` variable of ``environ`` that names no setting (a typo,
        or a setting a release no longer has), with the closest setting's variable if one is
        close. Variables other tools read under the prefix (``NOT_SETTINGS``) are not named.
        """
        known = [env_var(f.name) for f in fields(cls)]
        warnings = []
        for name in sorted(environ):
            if not name.startswith("EDGE_") or name in known or name in NOT_SETTINGS:
                continue
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]}?" if close else ""
            warnings.append(f"{name} is not a setting of this edge and is ignored{hint}")
        return warnings

    @classmethod
    def from_sources(
        cls,
        flags: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Settings:
        """Build from parsed flags (None means not given) over ``EDGE_*`` variables. An
        ``EDGE_*`` variable that names no setting is logged as a warning, never refused
        (other tools may share the prefix)."""
        flags = flags or {}
        environ = os.environ if environ is None else environ
        for warning in cls.unknown_variables(environ):
            log.warning("%s", warning)
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = env_var(f.name)
            raw = flags.get(f.name)
            source = "--" + f.name.replace("_", "-")
            if raw is None and name in environ:
                raw, source = environ[name], name
            if raw is None:
                continue
            if not isinstance(raw, str):  # a typed flag value (argparse bool)
                values[f.name] = raw
                continue
            try:
                values[f.name] = f.metadata["parse"](raw)
            except ValueError as exc:
                raise SettingsError(f"{source}: {exc}") from None
        settings = cls(**values)
        if settings.signing_key_previous is not None:
            # A rotation goes from one key the operator holds to another: a previous key
            # beside the database's own, or equal to the current one, is a mistake.
            if settings.signing_key is None:
                raise SettingsError(
                    "EDGE_SIGNING_KEY_PREVIOUS: set only beside EDGE_SIGNING_KEY, the new key"
                )
            if settings.signing_key_previous == settings.signing_key:
                raise SettingsError(
                    "EDGE_SIGNING_KEY_PREVIOUS: the same as EDGE_SIGNING_KEY; it names the "
                    "key being retired"
                )
        if settings.catalogue is not None and not settings.is_production:
            # The sandbox answers from the static catalogue shipped in the package,
            # so a partner's test results do not depend on how the host was started.
            raise SettingsError(
                "EDGE_CATALOGUE: the sandbox always serves its bundled catalogue; "
                "set a catalogue only for production"
            )
        return settings


# EDGE_* variables read by something other than the edge's settings: the QA kit's key of the
# edge under test, and the test suite's PostgreSQL binaries.
NOT_SETTINGS = frozenset({"EDGE_QA_KEY", "EDGE_TEST_PG_BIN"})


def env_var(name: str) -> str:
    return "EDGE_" + name.upper()


def describe() -> Iterable[tuple[str, str, str, str]]:
    """(field, variable, default, help) for every setting: the README table's source."""
    for f in fields(Settings):
        default = f.default
        if isinstance(default, tuple):
            shown = ",".join(map(str, default))
        else:
            shown = "" if default is None else str(default)
        yield f.name, env_var(f.name), shown, f.metadata["help"]


def add_arguments(
    parser: argparse.ArgumentParser,
    names: Iterable[str] | None = None,
    helps: Mapping[str, str] | None = None,
) -> None:
    """Add ``--flag`` options for the named settings (all when None) to a parser; ``helps``
    replaces a setting's help where one command uses it differently."""
    wanted = set(names) if names is not None else None
    for f in fields(Settings):
        if wanted is not None and f.name not in wanted:
            continue
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{(helps or {}).get(f.name, f.metadata['help'])} [{env_var(f.name)}]"
        if f.metadata["parse"] is _parse_bool:
            parser.add_argument(
                flag,
                dest=f.name,
                default=None,
                action=argparse.BooleanOptionalAction,
                help=help_text,
            )
        else:
            parser.add_argument(flag, dest=f.name, default=None, metavar="VALUE", help=help_text)
