"""The edge's rules for delivery events: what a beacon bills, which report counters it moves.

A storage backend never decides any of this: these functions compute the billing amount
and the counter bumps of an event, and the store writes them atomically with the event
(``Store.save_impression`` and friends), so the rules are the same on every backend.

- An impression counts once per dedupe key set: sharing any one key with a stored
  impression makes it a replay, which bills and counts nothing (the store enforces the
  uniqueness, since only it sees every node's events).
- The tag's url/ugc beacons, the pixel and the legacy beacon fire only once the ad is
  viewable (50% for 1 s), so each is both an impression and a viewable impression; an AI
  ad's render beacon is an impression and its view beacon a viewable impression.
- Only valid production impressions with a positive CPM bill, ``cpm / 1000`` each, to the
  ad, its publisher and its campaign (``billable_usd`` and ``billable_usd_cpm``).
- What a partner's serve handed out (the UGC pixel's token, the AI beacon URLs) names the
  rotation family of the partner's key (``key_family``): its impressions, clicks,
  conversions and what they bill count for that key's row too, as they count for the
  publisher of a tag's ad. The tag's own serves name no key; what was handed out before
  the family was sealed counts for no key.
- An impression the invalid-traffic rules flagged (``invalid_reason``) is stored, so its
  keys still make a replay a replay, but bills nothing and counts only as
  ``invalid_<reason>`` for its ad, publisher (or key) and campaign.
- An impression or click whose partner's key family has no valid key left
  (``key_revoked``, the first rule) counts for its ad and campaign only, never on the
  family's key row: what a revoked partner kept back and fires adds nothing to the row
  its revenue share is paid on, not even as invalid traffic.
- A hover counts once per impression token; a placement failure counts every time.
- A click counts once per ``click_id`` and impression (a replay counts nothing; the same
  id on another impression is another click): a valid one as
  ``clicks``, an invalid one as ``invalid_clicks_<reason>``, for its ad, campaign and
  publisher (or key). Only a valid production click of an ad served as CPC bills, its bid, and
  only while the campaign is within its budget and today's cap (the last event before
  either bills only what is left, ``clamp``); the store keeps at most one valid
  click per impression, and the edge re-judges a click that loses that race as a
  ``duplicate``.
- A conversion counts once per click, as ``conversions`` for the ad and campaign (and the
  key its click counted for); it bills the bid of an ad served as CPA, within the
  campaign's budget and cap.
- Pricing applies as served: one view of an ad bills under the one pricing model and bid
  its ad set had when the ad was served (sealed in its impression token or signed AI URL,
  kept with its click), CPM on the viewable impression, CPC on the first valid click, CPA
  on the conversion of a valid click, whatever the live catalogue says when those arrive.
  What was handed out before pricing was sealed is priced from the live catalogue. The
  campaign's gates (budget, today's cap, being in the live catalogue) are always live.
- An event of a campaign no longer in the live catalogue is counted as usual but bills
  nothing: there is no budget or cap left to check it against (its headroom is 0).
- Impressions, viewable impressions, valid clicks and billed amounts also go to the day
  buckets of the event's UTC day (``edge.counters.with_days``), in the same transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable

from edge.counters import (
    CONVERSION_VALUE,
    CountRow,
    billed_counts,
    utc_day,
    with_day,
    with_days,
)
from edge.ivt import KEY_REVOKED
from edge.store.base import Store
from edge.store.events import Click, Conversion, Hover, Impression, PlacementFailure
from matcher.pacing import MIN_CHARGE_USD
from matcher.types import PricingModel

# Kinds that mean "the ad was rendered" and those that mean "the ad was viewable".
RENDERED = frozenset({"url", "ugc", "legacy", "ai-render"})
VIEWABLE = frozenset({"url", "ugc", "legacy", "ai-view"})


def billing_usd(imp: Impression) -> float | None:
    """What this impression bills its campaign, or None when it bills nothing."""
    if imp.invalid_reason is not None:
        return None
    if imp.env == "production" and imp.cpm_usd is not None and imp.cpm_usd > 0:
        return imp.cpm_usd / 1000.0
    return None


def impression_counts(imp: Impression, billed: float | None) -> list[CountRow]:
    """The report counters a counted impression moves."""
    return _impression_counts(
        imp.kind,
        imp.ad_id,
        imp.publisher_id,
        imp.campaign_id,
        imp.invalid_reason,
        billed,
        imp.key_family,
    )


def _impression_counts(
    kind: str,
    ad_id: str,
    publisher_id: str | None,
    campaign_id: str | None,
    invalid_reason: str | None,
    billed: float | None,
    key_family: str | None,
) -> list[CountRow]:
    scopes = [("ad", ad_id)]
    if publisher_id:
        scopes.append(("publisher", publisher_id))
    if campaign_id:
        scopes.append(("campaign", campaign_id))
    if key_family and invalid_reason != KEY_REVOKED:
        scopes.append(("key", key_family))
    if invalid_reason is not None:
        counter = f"invalid_{invalid_reason}"
        return [(scope, sid, counter, 1) for scope, sid in scopes]
    rows: list[CountRow] = []
    for counter, applies in (
        ("impressions", kind in RENDERED),
        ("viewable_impressions", kind in VIEWABLE),
    ):
        if applies:
            rows += [(scope, sid, counter, 1) for scope, sid in scopes]
    if billed is not None:
        rows += billed_counts(ad_id, campaign_id, publisher_id, "cpm", billed, key_family)
    return rows


# An ad's impressions move the same counters all day: the bumps (with the day's) are made
# once per (kind, ad, publisher, campaign, verdict, amount, key, day) and shared, as immutable
# tuples, by every impression alike. Bounded; emptied when full (a new day refills it).
_COUNTS_CACHE_SIZE = 4096
_counts_cache: dict[tuple[object, ...], tuple[CountRow, ...]] = {}


def impression_counts_of_day(imp: Impression, billed: float | None) -> tuple[CountRow, ...]:
    """``with_days(impression_counts(imp, billed), imp.at)``, remembered per inputs."""
    day = utc_day(imp.at)
    key = (
        imp.kind,
        imp.ad_id,
        imp.publisher_id,
        imp.campaign_id,
        imp.invalid_reason,
        billed,
        imp.key_family,
        day,
    )
    rows = _counts_cache.get(key)
    if rows is None:
        if len(_counts_cache) >= _COUNTS_CACHE_SIZE:
            _counts_cache.clear()
        rows = tuple(with_day(impression_counts(imp, billed), day))
        _counts_cache[key] = rows
    return rows


def hover_counts(hover: Hover) -> list[CountRow]:
    rows: list[CountRow] = [("ad", hover.ad_id, "hovers", 1)]
    if hover.publisher_id:
        rows.append(("publisher", hover.publisher_id, "hovers", 1))
    return rows


def failure_counts(failure: PlacementFailure) -> list[CountRow]:
    rows: list[CountRow] = [("publisher", failure.publisher_id, "failures", 1)]
    if failure.ad_id:
        rows.append(("ad", failure.ad_id, "failures", 1))
    return rows


def clamp(price: float, headroom: float | None) -> float | None:
    """What an event priced ``price`` bills when its campaign may still be billed
    ``headroom`` USD (None: no budget or cap): the price, or the budget's last cents when
    less is left (a budget is a hard stop on what is billed), or None once nothing is."""
    if headroom is None:
        return price
    if headroom < MIN_CHARGE_USD:
        return None
    return min(price, headroom)


def cpm_within(cpm: float, headroom: float | None) -> float | None:
    """The CPM an impression bills at (``cpm / 1000`` each) with ``headroom`` left."""
    charge = clamp(cpm / 1000.0, headroom)
    return None if charge is None else charge * 1000.0


def click_charge(
    click: Click, pricing: PricingModel | None, headroom: float | None
) -> float | None:
    """What a judged click bills (its ``invalid_reason`` set or None), or None: nothing.

    ``pricing``: the pricing model its ad was served under (None: unknown, bills nothing);
    ``headroom``: USD its campaign may still be billed (None: no limit).
    """
    if click.invalid_reason is not None or click.env != "production":
        return None
    if pricing is None or pricing.type != "cpc":
        return None
    return clamp(pricing.bid_amount, headroom)


def conversion_charge(pricing: PricingModel | None, headroom: float | None) -> float | None:
    """What a conversion of a valid click bills, or None: nothing. ``pricing``: the
    pricing model its click's ad was served under (None: unknown, bills nothing)."""
    if pricing is None or pricing.type != "cpa":
        return None
    return clamp(pricing.bid_amount, headroom)


def click_counts(click: Click) -> list[CountRow]:
    """The report counters a counted click moves (its charge included)."""
    counter = "clicks" if click.invalid_reason is None else f"invalid_clicks_{click.invalid_reason}"
    key_family = None if click.invalid_reason == KEY_REVOKED else click.key_family
    scopes = (
        ("ad", click.ad_id),
        ("campaign", click.campaign_id),
        ("publisher", click.publisher_id),
        ("key", key_family),
    )
    rows: list[CountRow] = [(scope, sid, counter, 1) for scope, sid in scopes if sid]
    if click.charge_usd is not None:
        rows += billed_counts(
            click.ad_id,
            click.campaign_id,
            click.publisher_id,
            "cpc",
            click.charge_usd,
            click.key_family,
        )
    return rows


def conversion_counts(conversion: Conversion) -> list[CountRow]:
    """The report counters a counted conversion moves (its charge included)."""
    c = conversion.click
    scopes = (("ad", c.ad_id), ("campaign", c.campaign_id), ("key", c.key_family))
    rows: list[CountRow] = [(scope, sid, "conversions", 1) for scope, sid in scopes if sid]
    value = conversion.value_usd  # what the advertiser says it was worth: reported, never billed
    if value:
        rows += [(scope, sid, CONVERSION_VALUE, value) for scope, sid in scopes if sid]
    if conversion.charge_usd is not None:
        rows += billed_counts(
            c.ad_id, c.campaign_id, c.publisher_id, "cpa", conversion.charge_usd, c.key_family
        )
    return rows


def record_impression(store: Store, imp: Impression) -> Awaitable[bool]:
    """Count ``imp`` unless it is a replay; True when counted. What it returns is awaited
    until the commit of the impression (its row holds what it bills, ``billed_usd``) and
    its counter bumps (one transaction). It is the store's own awaitable, with no
    coroutine of its own around it: this runs on every impression beacon."""
    if not imp.dedupe_keys:
        raise ValueError("an impression needs at least one dedupe key")
    billed = billing_usd(imp)
    return store.save_impression(imp, billed, impression_counts_of_day(imp, billed))


async def record_hover(store: Store, hover: Hover) -> bool:
    """Record a hover once per impression token; True when recorded now."""
    return await store.save_hover(hover, hover_counts(hover))


async def record_failure(store: Store, failure: PlacementFailure) -> None:
    await store.save_failure(failure, failure_counts(failure))


async def record_click(store: Store, click: Click) -> bool:
    """Store a judged click with its charge and counter bumps in one commit; False when its
    ``click_id`` is stored already for its impression (a replay: nothing more is written).
    ``ClickConflict`` when it is valid and its impression has a valid click already."""
    return await store.save_click(click, with_days(click_counts(click), click.at))


async def record_conversion(store: Store, conversion: Conversion) -> bool:
    """Store a conversion with its charge and counter bumps in one commit; False when its
    click has converted already."""
    counts = with_days(conversion_counts(conversion), conversion.at)
    return await store.save_conversion(conversion, counts)
