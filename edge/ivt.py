"""Invalid traffic: which impressions and clicks are recorded but never billed, and why.

One classifier, called by every beacon that can bill (tag impressions, the pixel, AI
beacons, the earlier API's ``POST /ugc/impression``; clicks use ``classify_click``), so the
rules live in one place and the store only records the verdict. An invalid event is still
stored (it keeps its dedupe keys, so a replay of it is a replay) with its reason, counted
under ``invalid_<reason>`` in ``edge report`` and never billed. The answer to the client
is the same as for a valid event: a bot learns nothing from it.

Rules, in order (the first that applies is the reason):
- ``key_revoked`` (what a partner was handed: the UGC pixel's token, the AI beacon URLs,
  and their clicks): the rotation family of the partner's key sealed in it has no valid
  key left (every key revoked; ``Keyring.family_live``). First, so that nothing of a
  revoked partner is counted under another reason on its key row: such an event counts
  for its ad and campaign only (``edge.ledger``).
- ``bot_user_agent``: a known crawler or bot user agent (general invalid traffic), from the
  maintained ``crawler-user-agents`` list and the HTTP clients of scripts and servers it
  does not name (``SCRIPTED_CLIENTS``), or no user agent at all (or one of a few characters).
- ``client_mismatch``: the token was issued to another client (a keyed hash of the client
  address and user agent is sealed into it when the tag's match route issues it).
- ``publisher_removed``: the token's publisher is no longer registered.
- ``not_served`` (the earlier API's impression, which carries no token): the ad was not
  served for that post to that partner (no match of the post by its key, or a key it
  rotated to, answered that ad within the last day: each serve of the ad to the post
  renews its record).
- ``not_viewable`` (tag impressions): the beacon's own report of what was in view falls
  short of a viewable impression (less than 30% of the ad, or less than one second).
- ``click_before_impression`` (clicks): the click's impression was never stored.
- ``impression_invalid`` (clicks): the click's impression was stored as invalid traffic (a
  bot's, another client's, not viewable, over its rate): a click cannot make it valid.
- ``rate_limited``: the client went over its rate (tag impressions: ``EDGE_IVT_IMPRESSIONS``
  per client address; the tag's clicks: ``EDGE_IVT_CLICKS``, by default 1 a minute, 3 per
  10 minutes, 10 an hour, 25 a day). Beacons a partner fires (the UGC pixel, the AI render,
  view and click URLs) have no per-client rate: one partner server may fire them for many
  users. Only genuine events spend it: a resend of an event just judged gets its verdict
  again, and a replayed click (its click id already stored for its impression) is answered
  before it is judged.

Client addresses are never kept raw: rate limits key on a keyed hash of the address (IPv6
by its /64, the part a host keeps while it rotates privacy addresses).
"""

from __future__ import annotations

import ipaddress
import re
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import crawleruseragents
import msgspec

from edge.client_ip import IPAddress
from edge.settings import RateLimit, Settings
from edge.signing import Signer
from tag.builder import MRC_LARGE_AD_VISIBLE_RATIO, MRC_VISIBLE_MS

Reason = Literal[
    "key_revoked",
    "bot_user_agent",
    "client_mismatch",
    "publisher_removed",
    "rate_limited",
    "click_before_impression",
    "impression_invalid",
    "not_viewable",
    "not_served",
]
REASONS: tuple[Reason, ...] = (
    "key_revoked",
    "bot_user_agent",
    "client_mismatch",
    "publisher_removed",
    "rate_limited",
    "click_before_impression",
    "impression_invalid",
    "not_viewable",
    "not_served",
)
# The reason of an event of a revoked partner: it counts on no key row (``edge.ledger``).
KEY_REVOKED: Reason = "key_revoked"
# Reasons only clicks can have (a second valid click of one impression is a ``duplicate``),
# reasons only impressions can have, and the counters each kind of event moves in ``edge
# report`` when stored as invalid.
_CLICK_ONLY = ("click_before_impression", "impression_invalid", "duplicate")
_IMPRESSION_ONLY = ("not_viewable", "not_served")
INVALID_COUNTERS = (
    *(f"invalid_{r}" for r in REASONS if r not in _CLICK_ONLY),
    *(f"invalid_clicks_{r}" for r in (*REASONS, "duplicate") if r not in _IMPRESSION_ONLY),
)
CLIENT_PURPOSE = "client/v1"
TIMER_SLACK_MS = 5  # a timer set for MRC_VISIBLE_MS may fire this much early
_RECENT_EVENTS = 100_000  # rate verdicts remembered for resends (tokens live a day)
MAX_USER_AGENT = 512  # longer user agents are judged on their first 512 characters


class Client(msgspec.Struct, frozen=True):
    """Who sent a request: its address (None when unknown) and user agent. (A frozen
    msgspec ``Struct``: made per beacon, at a fraction of a frozen dataclass's cost.)"""

    ip: str | None
    user_agent: str


@dataclass(frozen=True, slots=True)
class Verdict:
    reason: Reason | None = None  # None: valid

    @property
    def valid(self) -> bool:
        return self.reason is None


VALID = Verdict()
# One verdict object per reason, made once: a beacon's verdict is one of these.
_INVALID: dict[Reason, Verdict] = {reason: Verdict(reason) for reason in REASONS}


def viewable_report(visible_ratio: float | None, visible_ms: int | None) -> bool:
    """Whether a tag's own report of an impression (the share of the ad in view and for how
    long, when it sends them) can be a viewable impression. The edge does not see the ad's
    size, so the share is held to the large-ad rule's, the lower of the two; the time gets
    ``TIMER_SLACK_MS`` for a browser timer that fires a little early."""
    if visible_ratio is not None and visible_ratio < MRC_LARGE_AD_VISIBLE_RATIO:
        return False
    return visible_ms is None or visible_ms >= MRC_VISIBLE_MS - TIMER_SLACK_MS


def counter_name(reason: Reason) -> str:
    """The report counter of invalid events with this reason."""
    return f"invalid_{reason}"


def network_of(ip: IPAddress | None, text: str | None = None) -> str:
    """What the client rules key on: the address (IPv6: its /64), "-" when unknown;
    ``text``: ``str(ip)`` when the caller has it already."""
    if ip is None:
        return "-"
    if ip.version == 6:
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip) if text is None else text


def _network(ip: str | None) -> str:
    if ip is None:
        return "-"
    try:
        return network_of(ipaddress.ip_address(ip))
    except ValueError:
        return "-"


def address_key(signer: Signer, network: str) -> str:
    """The keyed hash of a client network (``network_of``): the rate limits' key."""
    return signer.sign(CLIENT_PURPOSE, "addr", network)


def network_binding(signer: Signer, network: str, user_agent: str) -> str:
    """The keyed hash of a client network and user agent that a bound token carries."""
    return signer.sign(CLIENT_PURPOSE, "bind", network, user_agent[:MAX_USER_AGENT])


def client_binding(signer: Signer, client: Client) -> str:
    """A keyed hash of the client's address (IPv6: its /64) and user agent, for a token."""
    return network_binding(signer, _network(client.ip), client.user_agent)


def client_key(signer: Signer, client: Client) -> str:
    """A keyed hash of the client's address alone: the rate limits' key."""
    return address_key(signer, _network(client.ip))


# HTTP clients that scripts and servers use, which the crawler list does not name (it lists
# crawlers, and of the libraries only the commonest: curl, python-requests, Go, okhttp,
# axios, ...): the runtimes' own clients by their default user agents, API tools, headless
# DOMs and test runners, and a bare "Mozilla/5.0" (every browser follows it with its
# platform). Not here: the clients iOS and Flutter apps use on the reader's own device (Dart,
# Alamofire, CFNetwork), whose default agents a partner's app may fire its pixels with.
# Android's okhttp is on the crawler list itself (scripts use it as much as apps do).
SCRIPTED_CLIENTS = (
    r"^node(?:/|$)",
    r"^undici",
    r"^deno/",
    r"^bun/",
    r"^java(?:-http-client)?/",
    r"^ruby(?:/|$)",
    r"^faraday",
    r"^guzzlehttp",
    r"^restsharp",
    r"^ureq/",
    r"^(?:node-)?superagent",
    r"^apache-http(?:async)?client",
    r"^vert\.x-webclient",
    r"^lua-resty-http",
    r"^php/",
    r"^postmanruntime",
    r"^insomnia",
    r"^reqwest",
    r"^hyper/",
    r"^rest-client/",
    r"^typhoeus",
    r"^http\.rb",
    r"\b(?:windows)?powershell/",
    r"^reactornetty/",
    r"^fasthttp",
    r"^mojolicious",
    r"winhttp\.winhttprequest",
    r"^apache-cxf/",
    r"^google-http-java-client/",
    r"^needle/",
    r"^excon/",
    r"^laminas_http_client",
    r"^ktor-client",
    r"\bjsdom/",
    r"\bcypress/",
    r"^mozilla/[0-9.]+(?: \(compatible\))?$",
)
# No browser's user agent is shorter than this ("-", "x", "ruby"): stored as a bot's.
MIN_USER_AGENT = 5


class BotDetector:
    """Known crawler and bot user agents, from the ``crawler-user-agents`` package's list and
    ``SCRIPTED_CLIENTS``, compiled once into one expression, and agents shorter than
    ``MIN_USER_AGENT``; verdicts are cached per user-agent string. Matched
    without regard to case: a bot that sends "CURL/8.5.0" or "googlebot/2.1" is the same
    bot (no browser's user agent matches either way). The patterns are lower-cased and
    matched against the lower-cased agent: the list compiled with ``re.IGNORECASE`` costs
    ~1.1 ms per agent not yet cached, against ~0.3 ms this way."""

    def __init__(self, patterns: Sequence[str] | None = None) -> None:
        if patterns is None:
            listed = crawleruseragents.CRAWLER_USER_AGENTS_DATA
            patterns = [*(entry["pattern"] for entry in listed), *SCRIPTED_CLIENTS]
        self._regex = re.compile("|".join(f"(?:{lower_pattern(p)})" for p in patterns))
        self.is_bot = lru_cache(maxsize=8192)(self._is_bot)

    def _is_bot(self, user_agent: str) -> bool:
        ua = user_agent.strip()[:MAX_USER_AGENT]
        return len(ua) < MIN_USER_AGENT or self._regex.search(ua.lower()) is not None


_ESCAPE_OR_UPPER = re.compile(r"(\\.)|([A-Z]+)")


def lower_pattern(pattern: str) -> str:
    """``pattern`` matching the lower-cased texts that it matches in any case: its letters
    lower-cased, but not an escape's ("[\\s\\S]" stays "anything", not "whitespace")."""
    return _ESCAPE_OR_UPPER.sub(lambda m: m.group(1) or m.group(2).lower(), pattern)


class WindowLimiter:
    """At most ``requests`` accepted events per ``period_seconds`` for every window, counted
    over the true sliding window (a log of accepted times per key): "25 a day" means no 24
    hours hold more than 25, which a token bucket (up to twice that) does not promise."""

    _PRUNE_EVERY = 4096

    def __init__(self, limits: Sequence[RateLimit], clock: Callable[[], float]) -> None:
        self._limits = sorted(limits, key=lambda lim: lim.period_seconds)
        self._longest = self._limits[-1].period_seconds
        self._keep = max(lim.requests for lim in self._limits)
        self._clock = clock
        # Per key, its accepted times; the keys in the order of their last accepted event,
        # so those whose events have all left the longest window are at the front.
        self._log: OrderedDict[str, deque[float]] = OrderedDict()
        self._since_prune = 0

    def __len__(self) -> int:
        return len(self._log)

    def allow(self, key: str) -> bool:
        """Accept (and record) one event of ``key`` when every window has room."""
        now = self._clock()
        self._since_prune += 1
        if self._since_prune >= self._PRUNE_EVERY:
            self._prune(now)
        times = self._log.get(key)
        if times is None:
            times = self._log[key] = deque(maxlen=self._keep)
        for lim in self._limits:
            if len(times) < lim.requests:
                continue  # fewer events logged than the window allows: room in it
            since = now - lim.period_seconds
            if sum(1 for t in times if t > since) >= lim.requests:
                return False
        times.append(now)
        self._log.move_to_end(key)
        return True

    def _prune(self, now: float) -> None:
        """Forget the keys whose every event has left the longest window (they count in no
        window), from the front of the log up to the first key with an event inside it: the
        work is the keys forgotten, not every key kept. With a clock that steps back, a key
        behind a later one may outlive its window until that one's turn; it still answers
        as its times say."""
        self._since_prune = 0
        cutoff = now - self._longest
        log = self._log
        while log:
            key = next(iter(log))
            times = log[key]
            if times and times[-1] > cutoff:
                break
            del log[key]


class TrafficClassifier:
    """The one place that decides whether an impression or a click is valid."""

    def __init__(self, settings: Settings, clock: Callable[[], float]) -> None:
        self.bots = BotDetector()
        self._impressions = WindowLimiter((settings.ivt_impressions,), clock)
        self._clicks = WindowLimiter(settings.ivt_clicks, clock)
        self._recent: OrderedDict[str, Verdict] = OrderedDict()  # event id -> its rate verdict

    def _common(
        self,
        client: Client,
        bound_to: str | None,
        binding: str | None,
        publisher_known: bool,
        partner_live: bool,
        judge_agent: bool = True,
    ) -> Verdict | None:
        if not partner_live:
            return _INVALID["key_revoked"]
        if judge_agent and self.bots.is_bot(client.user_agent):
            return _INVALID["bot_user_agent"]
        if bound_to is not None and bound_to != binding:
            return _INVALID["client_mismatch"]
        if not publisher_known:
            return _INVALID["publisher_removed"]
        return None

    def classify_impression(
        self,
        client: Client,
        *,
        key: str,
        bound_to: str | None = None,
        binding: str | None = None,
        publisher_known: bool = True,
        partner_live: bool = True,
        rate_limited: bool = True,
        event_id: str | None = None,
        viewable: bool = True,
        served: bool = True,
        judge_agent: bool = True,
    ) -> Verdict:
        """``key``: ``client_key`` of the client; ``bound_to``: the binding sealed in the
        token (None: not bound, e.g. a partner's pixel); ``binding``: this client's
        ``client_binding``; ``partner_live``: False when the partner key family sealed in
        what the beacon carries has no valid key left; ``rate_limited``: whether the
        per-client rate applies;
        ``event_id``: the token's id, so a resend of a beacon just judged does not spend
        the client's rate a second time (the store still decides what is a replay);
        ``viewable``: False when the beacon's own report of what was in view falls short of
        a viewable impression (``viewable_report``). Such a beacon spends no rate.
        ``served``: False when no match served this ad where the impression says it was
        shown (the earlier API's impression, which carries no token). ``judge_agent``:
        False when ``client.user_agent`` is not a reader's (the earlier API's impression
        fired by the partner's server without naming the reader's browser): the bot rule
        is skipped, the others apply."""
        found = self._common(client, bound_to, binding, publisher_known, partner_live, judge_agent)
        if found is not None:
            return found
        if not served:
            return _INVALID["not_served"]
        if not viewable:
            return _INVALID["not_viewable"]
        if rate_limited:
            return self._rated(self._impressions, key, event_id)
        return VALID

    def classify_click(
        self,
        client: Client,
        *,
        key: str,
        bound_to: str | None = None,
        binding: str | None = None,
        publisher_known: bool = True,
        partner_live: bool = True,
        impression_seen: bool = True,
        impression_valid: bool = True,
        rate_limited: bool = True,
        event_id: str | None = None,
    ) -> Verdict:
        """A click: the impression rules, then click-before-impression, then a click on an
        impression stored as invalid, then (when ``rate_limited``) the click rates
        (``EDGE_IVT_CLICKS`` per client address). ``event_id``: the click's own id (its
        click id within its impression), so copies of one click judged before either is
        stored share one verdict and spend the client's rate once. A replay of a stored
        tag click is not judged at all: the tag's click routes recognise it first (a
        partner's click spends no rate: the store drops its replay)."""
        found = self._common(client, bound_to, binding, publisher_known, partner_live)
        if found is not None:
            return found
        if not impression_seen:
            return _INVALID["click_before_impression"]
        if not impression_valid:
            return _INVALID["impression_invalid"]
        if rate_limited:
            return self._rated(self._clicks, key, event_id)
        return VALID

    def _rated(self, limiter: WindowLimiter, key: str, event_id: str | None) -> Verdict:
        """The rate verdict of an event of ``key``: the one already given to ``event_id``
        (a resend or a copy in flight spends nothing more), else ``limiter``'s."""
        if event_id is not None:
            known = self._recent.get(event_id)
            if known is not None:
                return known
        verdict = VALID if limiter.allow(key) else _INVALID["rate_limited"]
        if event_id is not None:
            self._recent[event_id] = verdict
            if len(self._recent) > _RECENT_EVENTS:
                self._recent.popitem(last=False)
        return verdict
