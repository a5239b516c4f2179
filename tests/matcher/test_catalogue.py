"""The catalogue: strict validation with JSON paths, lookups, ad numbers, the sandbox file."""

from __future__ import annotations

import hashlib
import json

import pytest

from matcher.catalogue import (
    Catalogue,
    CatalogueError,
    ad_number,
    load_catalogue,
    parse_catalogue,
)
from matcher.eligibility import flight_gate

AD = {
    "id": "ad-1",
    "title": "Trail shoes",
    "cta": "Shop",
    "description": "Shoes.",
    "click_through_url": "https://example.com/x",
    "ttl_seconds": 900,
}
SET = {"id": "as-1", "products": ["ugc"], "pricing_model": {"type": "cpc", "bid_amount": 1}}
CAMP = {"id": "c-1", "advertiser_name": "Acme", "status": "active"}


def doc(ad=None, ad_set=None, camp=None, **top):
    s = {**SET, **(ad_set or {}), "ads": [{**AD, **(ad or {})}]}
    return {"campaigns": [{**CAMP, **(camp or {}), "ad_sets": [s]}], **top}


def errors(d) -> list[tuple[str, str]]:
    with pytest.raises(CatalogueError) as err:
        parse_catalogue(json.dumps(d))
    return err.value.errors


def test_minimal_catalogue_parses_with_defaults():
    cat = parse_catalogue(json.dumps(doc()))
    p = cat.placement("ad-1")
    assert p.campaign.budget_usd is None and p.campaign.start_at is None
    assert p.ad_set.geo is None and p.ad.pixel_trackers == () and p.ad.keywords == ()


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"extra": 1}, "$.extra"),
        ({"camp": {"budget": 5}}, "$.campaigns[0].budget"),
        ({"ad": {"colour": "red"}}, "$.campaigns[0].ad_sets[0].ads[0].colour"),
        ({"ad": {"ttl_seconds": "900"}}, "$.campaigns[0].ad_sets[0].ads[0].ttl_seconds"),
        ({"ad": {"ttl_seconds": 9.5}}, "$.campaigns[0].ad_sets[0].ads[0].ttl_seconds"),
        (
            {"ad": {"click_through_url": "javascript:x"}},
            "$.campaigns[0].ad_sets[0].ads[0].click_through_url",
        ),
        ({"ad": {"title": " "}}, "$.campaigns[0].ad_sets[0].ads[0].title"),
        ({"ad": {"keywords": ["ok", 3]}}, "$.campaigns[0].ad_sets[0].ads[0].keywords[1]"),
        (
            {
                "ad": {
                    "pixel_trackers": [{"vendor": "v", "tracker_type": "x", "url": "https://a.b"}]
                }
            },
            "$.campaigns[0].ad_sets[0].ads[0].pixel_trackers[0].tracker_type",
        ),
        ({"ad_set": {"products": []}}, "$.campaigns[0].ad_sets[0].products"),
        ({"ad_set": {"products": ["ugc", "ugc"]}}, "$.campaigns[0].ad_sets[0].products"),
        (
            {"ad_set": {"pricing_model": {"type": "cpv", "bid_amount": 1}}},
            "$.campaigns[0].ad_sets[0].pricing_model.type",
        ),
        ({"ad_set": {"geo": {"states": ["XX"]}}}, "$.campaigns[0].ad_sets[0].geo.states[0]"),
        ({"ad_set": {"geo": {"zipcodes": ["9410"]}}}, "$.campaigns[0].ad_sets[0].geo.zipcodes[0]"),
        (
            {"ad_set": {"geo": {"radius": [{"lat": 91, "lon": 0, "km": 5}]}}},
            "$.campaigns[0].ad_sets[0].geo.radius[0].lat",
        ),
        (
            {"ad_set": {"geo": {"cities": [{"city": "Austin"}]}}},
            "$.campaigns[0].ad_sets[0].geo.cities[0].state",
        ),
        ({"camp": {"status": "on"}}, "$.campaigns[0].status"),
        ({"camp": {"start_at": "2026-01-01"}}, "$.campaigns[0].start_at"),
        (
            {"camp": {"start_at": "2026-02-01T00:00:00Z", "end_at": "2026-01-01T00:00:00Z"}},
            "$.campaigns[0].end_at",
        ),
        ({"camp": {"budget_usd": -1}}, "$.campaigns[0].budget_usd"),
        ({"camp": {"budget_usd": True}}, "$.campaigns[0].budget_usd"),
    ],
)
def test_each_error_names_its_json_path(change, path):
    top = {k: v for k, v in change.items() if k not in ("ad", "ad_set", "camp")}
    d = doc(change.get("ad"), change.get("ad_set"), change.get("camp"), **top)
    assert path in [p for p, _ in errors(d)]


def test_all_errors_are_reported_at_once():
    d = doc({"ttl_seconds": 0, "cta": ""}, {"products": ["tv"]}, {"status": "x"})
    assert len(errors(d)) == 4


def test_duplicate_ids_are_errors():
    d = doc()
    d["campaigns"].append(json.loads(json.dumps(d["campaigns"][0])))
    paths = [p for p, _ in errors(d)]
    assert "$.campaigns[1].id" in paths and "$.campaigns[1].ad_sets[0].ads[0].id" in paths


def test_not_json_and_not_an_object():
    assert errors_of(b"{")[0][0] == "$"
    assert errors_of(b"[]") == [("$", "expected an object, got an array")]


def errors_of(raw: bytes):
    with pytest.raises(CatalogueError) as err:
        parse_catalogue(raw)
    return err.value.errors


def test_ad_numbers_are_stable_positive_and_53_bit():
    cat = load_catalogue()
    for p in cat.placements:
        n = cat.ad_number(p.ad.id)
        assert 0 < n < 2**53 and n == ad_number(p.ad.id)
        assert cat.placement_by_number(n) is p
    assert cat.placement_by_number(12345) is None and cat.placement("nope") is None
    assert ad_number("ad-dog-food") == 1 + int.from_bytes(
        hashlib.sha256(b"ad-dog-food").digest()[:8], "big"
    ) % (2**53 - 1)


def test_content_hash_follows_content():
    a = parse_catalogue(json.dumps(doc()))
    b = parse_catalogue(json.dumps(doc({"title": "Other"})))
    assert a.content_hash != b.content_hash
    assert a.content_hash == Catalogue(a.campaigns).content_hash


def test_sandbox_catalogue_is_rich_enough():
    cat = load_catalogue()
    now = 1_790_000_000.0  # 2026-09-21
    assert len(cat) >= 40 and len(cat.campaigns) >= 12
    assert any(c.status == "paused" for c in cat.campaigns)
    assert any(flight_gate(c, now) == "expired" for c in cat.campaigns)
    geo_sets = [s for s in cat.ad_sets() if s.geo is not None]
    assert len(geo_sets) >= 5
    kinds = {
        k
        for s in geo_sets
        for k in ("states", "dmas", "cities", "zipcodes", "radius")
        if getattr(s.geo, k)
    }
    assert kinds == {"states", "dmas", "cities", "zipcodes", "radius"}
    assert all(p.ad.ttl_seconds > 0 and p.ad.pixel_trackers for p in cat.placements)
    assert {"ugc", "ai"} <= {prod for s in cat.ad_sets() for prod in s.products}
    dog = cat.placement("ad-dog-food")
    assert "dog food" in dog.ad.keywords


def test_one_rfc3339_parser_for_flight_dates_and_created_at():
    from matcher.catalogue import parse_timestamp

    assert parse_timestamp("2026-05-01T12:30:00Z") == parse_timestamp("2026-05-01t14:30:00+02:00")
    assert parse_timestamp("2026-05-01T12:30:00") is None  # the catalogue names its zone
    naive = parse_timestamp("2026-05-01T12:30:00", naive_is_utc=True)  # a partner's created_at
    assert naive == parse_timestamp("2026-05-01T12:30:00Z")
    for bad in ("2026-05-01", "20260501T123000Z", "2026-13-01T00:00:00Z", "yesterday"):
        assert parse_timestamp(bad, naive_is_utc=True) is None, bad


def test_pacing_and_daily_cap_default_and_parse():
    c = parse_catalogue(json.dumps(doc())).campaigns[0]
    assert (c.pacing, c.daily_cap_usd) == ("even", None)
    c = parse_catalogue(json.dumps(doc(camp={"pacing": "asap", "daily_cap_usd": 25}))).campaigns[0]
    assert (c.pacing, c.daily_cap_usd) == ("asap", 25.0)


@pytest.mark.parametrize(
    ("camp", "path", "words"),
    [
        ({"pacing": "fast"}, "$.campaigns[0].pacing", "expected even or asap"),
        ({"pacing": None}, "$.campaigns[0].pacing", "expected even or asap"),
        ({"daily_cap_usd": -1}, "$.campaigns[0].daily_cap_usd", "must be from 0"),
        ({"daily_cap_usd": "10"}, "$.campaigns[0].daily_cap_usd", "expected a number"),
        ({"daily_cap": 10}, "$.campaigns[0].daily_cap", "unknown field"),
    ],
)
def test_pacing_fields_are_checked_with_their_paths(camp, path, words):
    found = errors(doc(camp=camp))
    assert any(p == path and words in m for p, m in found), found


@pytest.mark.parametrize(
    ("geo", "item", "words"),
    [
        ({"countries": ["USA"]}, "countries[0]", "expected a 2-letter country code"),
        ({"states": ["ZZ"]}, "states[0]", "expected a US state code"),
        ({"dmas": ["80"]}, "dmas[0]", "expected a 3-digit DMA code"),
        ({"zipcodes": [94107]}, "zipcodes[0]", "expected a 5-digit ZIP code"),
    ],
)
def test_a_bad_list_item_says_what_was_expected_in_words(geo, item, words):
    # The kind of item is named in words, never cut from the field's name ("countrie").
    found = errors(doc(ad_set={"geo": geo}))
    assert any(p == f"$.campaigns[0].ad_sets[0].geo.{item}" and words in m for p, m in found)
    assert not any("countrie" in m for _, m in found), found
    found = errors(doc(ad={"keywords": ["  "]}))
    assert (
        "$.campaigns[0].ad_sets[0].ads[0].keywords[0]",
        "expected a keyword (non-blank text), got '  '",
    ) in found


def test_the_documented_example_is_a_valid_catalogue():
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "catalogue.md").read_text()
    example = text.split("```json", 1)[1].split("```", 1)[0]
    c = parse_catalogue(example).campaigns[0]
    assert (c.pacing, c.daily_cap_usd, c.budget_usd) == ("even", 250.0, 5000.0)
