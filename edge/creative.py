"""An ad's creative fields and the price its impression bills: the parts every answer that
carries an ad shares (/v1 bodies, /dea placements)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from matcher.types import Placement

if TYPE_CHECKING:
    from edge.context import Context


# The advertiser's macro for the click id in its click_through_url: the tag puts the
# rendering's click id there (tag/src/render.js), /v1/ai/process the id its click URL stores.
CLICK_ID_MACRO = "{click_id}"


def with_click_id(click_through_url: str, click_id: str) -> str:
    """The advertiser's URL with ``click_id`` in place of every ``{click_id}`` it put there
    (a click id is ``A-Z a-z 0-9 _ -``: nothing to escape); without one, exactly as given."""
    return click_through_url.replace(CLICK_ID_MACRO, click_id)


def creative(p: Placement) -> dict[str, Any]:
    """The creative fields every product answers with."""
    return {
        "title": p.ad.title,
        "cta": p.ad.cta,
        "click_through_url": p.ad.click_through_url,
        "advertiser_name": p.campaign.advertiser_name,
        "ttl_seconds": p.ad.ttl_seconds,
        "pixel_trackers": [
            {"vendor": t.vendor, "tracker_type": t.tracker_type, "url": t.url}
            for t in p.ad.pixel_trackers
        ],
    }


def cpm_usd(ctx: Context, p: Placement) -> float | None:
    """The per-mille price an impression bills, only in production (the sandbox never
    bills) and only for CPM ad sets."""
    pricing = p.ad_set.pricing_model
    if ctx.settings.is_production and pricing.type == "cpm":
        return pricing.bid_amount
    return None
