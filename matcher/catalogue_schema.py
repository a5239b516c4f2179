"""Validation of the catalogue file's shape, every error with its JSON path.

Unknown fields are errors, not ignored: a typo such as ``"budget"`` for ``"budget_usd"``
would otherwise silently drop the advertiser's cap. The walk collects every problem
(path + message) instead of stopping at the first, so ``edge catalogue validate`` shows a
whole file's worth of fixes at once. ``validate`` returns typed ``matcher.types`` objects.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any, TypeVar

from matcher.types import (
    Ad,
    AdSet,
    Campaign,
    CityTarget,
    GeoTargets,
    PixelTracker,
    PricingModel,
    ProductName,
    RadiusTarget,
)

_STATE_CODES = (
    "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH "
    "NJ NM NY NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY PR GU VI AS MP"
)
STATES = frozenset(_STATE_CODES.split())
TRACKER_TYPES = ("impression", "viewable", "click")
T = TypeVar("T")
_URL = re.compile(r"https?://[^\s/?#]+[^\s]*")


class _Checker:
    """Walks the parsed JSON; each ``_x`` method returns the typed value or None on error."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []
        # One object per distinct short value (CTAs, keywords and their tuples, tracker
        # vendors and kinds, products): the JSON parser makes a new string for every
        # occurrence, and at 100k ads those copies were a third of the catalogue's memory.
        self._pool: dict[Any, Any] = {}

    def share(self, value: T) -> T:
        """``value``, or the equal one seen before (values must be hashable)."""
        return self._pool.setdefault(value, value)  # type: ignore[no-any-return]

    def err(self, path: str, message: str) -> None:
        self.errors.append((path, message))

    def obj(self, value: Any, path: str, required: set[str], optional: set[str]) -> bool:
        if not isinstance(value, dict):
            self.err(path, f"expected an object, got {_kind(value)}")
            return False
        for key in sorted(set(value) - required - optional):
            self.err(f"{path}.{key}", "unknown field")
        for key in sorted(required - set(value)):
            self.err(f"{path}.{key}", "required field is missing")
        return True

    def text(
        self, obj: dict[str, Any], key: str, path: str, *, max_len: int = 2000, empty: bool = False
    ) -> str | None:
        value = obj.get(key)
        p = f"{path}.{key}"
        if not isinstance(value, str):
            if key in obj:
                self.err(p, f"expected a string, got {_kind(value)}")
            return None
        if not empty and not value.strip():
            self.err(p, "must not be empty")
            return None
        if len(value) > max_len:
            self.err(p, f"at most {max_len} characters, got {len(value)}")
            return None
        return value

    def number(
        self, value: Any, path: str, lo: float, hi: float, *, integer: bool = False
    ) -> float | None:
        ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type:
            self.err(
                path, f"expected {'an integer' if integer else 'a number'}, got {_kind(value)}"
            )
            return None
        if not lo <= value <= hi:
            self.err(path, f"must be from {lo:g} to {hi:g}, got {value}")
            return None
        number: float = value
        return number

    def array(self, value: Any, path: str, *, non_empty: bool = False) -> list[Any] | None:
        if not isinstance(value, list):
            self.err(path, f"expected an array, got {_kind(value)}")
            return None
        if non_empty and not value:
            self.err(path, "must not be empty")
            return None
        return value

    def url(self, obj: dict[str, Any], key: str, path: str) -> str | None:
        value = self.text(obj, key, path)
        if value is not None and not _URL.fullmatch(value):
            self.err(f"{path}.{key}", "expected an absolute http(s) URL")
            return None
        return value

    def timestamp(
        self, obj: dict[str, Any], key: str, path: str
    ) -> tuple[str | None, float | None]:
        value = obj.get(key)
        if value is None:
            return None, None
        if not isinstance(value, str):
            self.err(f"{path}.{key}", f"expected an RFC 3339 timestamp or null, got {_kind(value)}")
            return None, None
        epoch = parse_timestamp(value)
        if epoch is None:
            self.err(f"{path}.{key}", f"not an RFC 3339 timestamp with a zone: {value!r}")
        return value, epoch


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
        type(value), "an array" if isinstance(value, list) else "an object"
    )


_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:[Zz]|[+-]\d{2}:?\d{2})?",
    re.ASCII,  # \d is 0-9 only, not every script's digits
)


def parse_timestamp(text: str, *, naive_is_utc: bool = False) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp; None when it is not one.

    One without a zone is refused, or taken as UTC with ``naive_is_utc`` (a partner's
    ``created_at``); the catalogue's flight dates must name their zone.
    """
    if not _RFC3339.fullmatch(text):
        return None
    try:
        when = dt.datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        if not naive_is_utc:
            return None
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def normalise_state(code: str) -> str | None:
    """``US-CA`` or ``CA`` (any case) -> ``US-CA``; None when it is not a US state code."""
    code = code.strip().upper()
    if code.startswith("US-"):
        code = code[3:]
    return f"US-{code}" if code in STATES else None


# -- the walk over the file's shape (docs/catalogue.md) ----------------------------------------


def _campaign(c: _Checker, raw: Any, path: str, seen: dict[str, set[str]]) -> Campaign | None:
    req = {"id", "advertiser_name", "status", "ad_sets"}
    optional = {"start_at", "end_at", "budget_usd", "pacing", "daily_cap_usd"}
    if not c.obj(raw, path, req, optional):
        return None
    cid = _unique_id(c, raw, path, seen["campaign"])
    name = c.text(raw, "advertiser_name", path, max_len=200)
    status = raw.get("status")
    if "status" in raw and status not in ("active", "paused", "archived"):
        c.err(f"{path}.status", f"expected active, paused or archived, got {status!r}")
    start, start_epoch = c.timestamp(raw, "start_at", path)
    end, end_epoch = c.timestamp(raw, "end_at", path)
    if start_epoch is not None and end_epoch is not None and end_epoch <= start_epoch:
        c.err(f"{path}.end_at", "must be after start_at")
    budget = raw.get("budget_usd")
    if budget is not None:
        budget = c.number(budget, f"{path}.budget_usd", 0, 1e12)
    pacing = raw.get("pacing", "even")
    if pacing not in ("even", "asap"):
        c.err(f"{path}.pacing", f"expected even or asap, got {pacing!r}")
    daily_cap = raw.get("daily_cap_usd")
    if daily_cap is not None:
        daily_cap = c.number(daily_cap, f"{path}.daily_cap_usd", 0, 1e12)
    sets_raw = (
        c.array(raw.get("ad_sets"), f"{path}.ad_sets", non_empty=True) if "ad_sets" in raw else None
    )
    ad_sets = [_ad_set(c, s, f"{path}.ad_sets[{i}]", seen) for i, s in enumerate(sets_raw or [])]
    valid_sets = [s for s in ad_sets if s is not None]
    if (
        cid is None
        or name is None
        or status not in ("active", "paused", "archived")
        or len(valid_sets) != len(ad_sets)
    ):
        return None
    if pacing not in ("even", "asap"):
        return None
    return Campaign(
        id=cid,
        advertiser_name=name,
        status=status,
        start_at=start,
        end_at=end,
        budget_usd=None if budget is None else float(budget),
        ad_sets=tuple(valid_sets),
        pacing=pacing,
        daily_cap_usd=None if daily_cap is None else float(daily_cap),
    )


def _unique_id(c: _Checker, raw: dict[str, Any], path: str, seen: set[str]) -> str | None:
    ident = c.text(raw, "id", path, max_len=128)
    if ident is None:
        return None
    if not re.fullmatch(r"[A-Za-z0-9._:-]+", ident):
        c.err(f"{path}.id", "use only letters, digits and . _ : -")
        return None
    if ident in seen:
        c.err(f"{path}.id", f"duplicate id {ident!r}")
        return None
    seen.add(ident)
    return ident


def _ad_set(c: _Checker, raw: Any, path: str, seen: dict[str, set[str]]) -> AdSet | None:
    if not c.obj(raw, path, {"id", "products", "pricing_model", "ads"}, {"geo"}):
        return None
    sid = _unique_id(c, raw, path, seen["ad_set"])
    products: tuple[ProductName, ...] | None = None
    if "products" in raw and (
        plist := c.array(raw["products"], f"{path}.products", non_empty=True)
    ):
        bad = [p for p in plist if p not in ("ugc", "ai")]
        if bad:
            c.err(f"{path}.products", f"expected ugc and/or ai, got {bad[0]!r}")
        elif len(set(plist)) != len(plist):
            c.err(f"{path}.products", "lists a product twice")
        else:
            products = c.share(tuple(plist))
    pricing = (
        _pricing(c, raw.get("pricing_model"), f"{path}.pricing_model")
        if "pricing_model" in raw
        else None
    )
    geo = _geo(c, raw["geo"], f"{path}.geo") if raw.get("geo") is not None else None
    geo_ok = raw.get("geo") is None or geo is not None
    ads_raw = c.array(raw.get("ads"), f"{path}.ads", non_empty=True) if "ads" in raw else None
    ads = [_ad(c, a, f"{path}.ads[{i}]", seen) for i, a in enumerate(ads_raw or [])]
    valid_ads = [a for a in ads if a is not None]
    if sid is None or products is None or pricing is None or not geo_ok:
        return None
    if not ads or len(valid_ads) != len(ads):
        return None
    return AdSet(id=sid, products=products, pricing_model=pricing, ads=tuple(valid_ads), geo=geo)


def _pricing(c: _Checker, raw: Any, path: str) -> PricingModel | None:
    if not c.obj(raw, path, {"type", "bid_amount"}, set()):
        return None
    kind = raw.get("type")
    if "type" in raw and kind not in ("cpc", "cpm", "cpa"):
        c.err(f"{path}.type", f"expected cpc, cpm or cpa, got {kind!r}")
        kind = None
    bid = (
        c.number(raw["bid_amount"], f"{path}.bid_amount", 0.0001, 10_000)
        if "bid_amount" in raw
        else None
    )
    if kind is None or bid is None:
        return None
    return PricingModel(type=kind, bid_amount=float(bid))


def _str_list(
    c: _Checker,
    raw: dict[str, Any],
    key: str,
    path: str,
    check: Callable[[str], str | None],
    expected: str,
) -> tuple[str, ...] | None:
    """The strings of ``raw[key]`` as ``check`` returns them; an item it refuses (None) is an
    error saying what was ``expected`` (the item's kind named in words, not from ``key``)."""
    items = c.array(raw[key], f"{path}.{key}")
    if items is None:
        return None
    out = []
    for i, item in enumerate(items):
        value = check(item) if isinstance(item, str) else None
        if value is None:
            c.err(f"{path}.{key}[{i}]", f"expected {expected}, got {item!r}")
        else:
            out.append(value)
    return tuple(out) if len(out) == len(items) else None


def _geo(c: _Checker, raw: Any, path: str) -> GeoTargets | None:
    keys = {"countries", "states", "dmas", "cities", "zipcodes", "radius"}
    if not c.obj(raw, path, set(), keys):
        return None
    checks: dict[str, tuple[Callable[[str], str | None], str]] = {
        "countries": (
            lambda s: s.upper() if re.fullmatch(r"[A-Za-z]{2}", s) else None,
            "a 2-letter country code (ISO 3166-1, e.g. US)",
        ),
        "states": (normalise_state, "a US state code (e.g. CA or US-CA)"),
        "dmas": (lambda s: s if re.fullmatch(r"[0-9]{3}", s) else None, "a 3-digit DMA code"),
        "zipcodes": (lambda s: s if re.fullmatch(r"[0-9]{5}", s) else None, "a 5-digit ZIP code"),
    }
    out: dict[str, Any] = {}
    ok = True
    for key, (check, expected) in checks.items():
        if key in raw:
            out[key] = _str_list(c, raw, key, path, check, expected)
            ok &= out[key] is not None
    if "cities" in raw:
        cities = []
        for i, item in enumerate(c.array(raw["cities"], f"{path}.cities") or []):
            p = f"{path}.cities[{i}]"
            if c.obj(item, p, {"city", "state"}, set()):
                name, state = c.text(item, "city", p, max_len=100), c.text(item, "state", p)
                norm = normalise_state(state) if state else None
                if state and norm is None:
                    c.err(f"{p}.state", f"not a US state code: {state!r}")
                if name and norm:
                    cities.append(CityTarget(city=name, state=norm))
        ok &= isinstance(raw["cities"], list) and len(cities) == len(raw["cities"])
        out["cities"] = tuple(cities)
    if "radius" in raw:
        circles = []
        for i, item in enumerate(c.array(raw["radius"], f"{path}.radius") or []):
            p = f"{path}.radius[{i}]"
            if c.obj(item, p, {"lat", "lon", "km"}, set()):
                vals = [
                    c.number(item[k], f"{p}.{k}", lo, hi) if k in item else None
                    for k, lo, hi in (("lat", -90, 90), ("lon", -180, 180), ("km", 0.1, 1000))
                ]
                lat, lon, km = vals
                if lat is not None and lon is not None and km is not None:
                    circles.append(RadiusTarget(float(lat), float(lon), float(km)))
        ok &= isinstance(raw["radius"], list) and len(circles) == len(raw["radius"])
        out["radius"] = tuple(circles)
    return GeoTargets(**out) if ok else None


def _ad(c: _Checker, raw: Any, path: str, seen: dict[str, set[str]]) -> Ad | None:
    req = {"id", "title", "cta", "description", "click_through_url", "ttl_seconds"}
    if not c.obj(raw, path, req, {"keywords", "pixel_trackers"}):
        return None
    aid = _unique_id(c, raw, path, seen["ad"])
    title = c.text(raw, "title", path, max_len=120)
    cta = c.text(raw, "cta", path, max_len=40)
    cta = c.share(cta) if cta is not None else None
    description = c.text(raw, "description", path, max_len=1000, empty=True)
    url = c.url(raw, "click_through_url", path)
    ttl = (
        c.number(raw["ttl_seconds"], f"{path}.ttl_seconds", 1, 86400, integer=True)
        if "ttl_seconds" in raw
        else None
    )
    keywords: tuple[str, ...] | None = ()
    if "keywords" in raw:
        keywords = _str_list(
            c,
            raw,
            "keywords",
            path,
            lambda s: c.share(s.strip()) or None,
            "a keyword (non-blank text)",
        )
        keywords = c.share(keywords) if keywords is not None else None
    trackers: list[PixelTracker] = []
    for i, t in enumerate(c.array(raw.get("pixel_trackers", []), f"{path}.pixel_trackers") or []):
        p = f"{path}.pixel_trackers[{i}]"
        if c.obj(t, p, {"vendor", "tracker_type", "url"}, set()):
            vendor, kind, turl = (
                c.text(t, "vendor", p, max_len=100),
                t.get("tracker_type"),
                c.url(t, "url", p),
            )
            if "tracker_type" in t and kind not in TRACKER_TYPES:
                c.err(
                    f"{p}.tracker_type", f"expected one of {', '.join(TRACKER_TYPES)}, got {kind!r}"
                )
            elif vendor and turl:
                trackers.append(
                    PixelTracker(vendor=c.share(vendor), tracker_type=c.share(kind), url=turl)
                )
    trackers_ok = len(trackers) == len(raw.get("pixel_trackers", []) or [])
    if (
        aid is None
        or title is None
        or cta is None
        or description is None
        or url is None
        or ttl is None
        or keywords is None
        or not trackers_ok
    ):
        return None
    return Ad(
        id=aid,
        title=title,
        cta=cta,
        description=description,
        keywords=keywords,
        click_through_url=url,
        ttl_seconds=int(ttl),
        pixel_trackers=tuple(trackers),
    )


def validate(data: Any) -> tuple[tuple[Campaign, ...], list[tuple[str, str]]]:
    """(campaigns, errors) of a parsed JSON document; campaigns are empty on any error."""
    c = _Checker()
    seen: dict[str, set[str]] = {"campaign": set(), "ad_set": set(), "ad": set()}
    campaigns: list[Campaign] = []
    if c.obj(data, "$", {"campaigns"}, set()) and "campaigns" in data:
        for i, raw in enumerate(c.array(data["campaigns"], "$.campaigns") or []):
            campaign = _campaign(c, raw, f"$.campaigns[{i}]", seen)
            if campaign is not None:  # else its errors are in c.errors
                campaigns.append(campaign)
    if c.errors:
        return (), c.errors
    return tuple(campaigns), []
