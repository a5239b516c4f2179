"""edge.partner.listing: the Ad Manager's id-sorted view of a catalogue."""

from edge.partner.listing import Listing
from matcher.catalogue import load_catalogue
from tests.routes.conftest import CATALOGUE


def test_listing_sorts_by_id_and_names_each_ad_sets_campaign():
    listing = Listing(load_catalogue(CATALOGUE))
    assert listing.campaign_ids == sorted(listing.campaign_ids) == ["cmp-ai", "cmp-pets", "cmp-run"]
    assert listing.ad_set_ids == sorted(listing.ad_set_ids)
    by_id = {s["id"]: s for s in listing.ad_sets}
    assert by_id["as-run-mn"]["campaign_id"] == "cmp-run"
    assert [c["id"] for c in listing.campaigns] == listing.campaign_ids
