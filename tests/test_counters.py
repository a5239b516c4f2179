"""What the routes count: a /dea match answer per publisher, ad and campaign."""

from edge.counters import Counters, count_placements


def test_a_match_answer_counts_slots_per_publisher_and_matches_per_ad_and_campaign():
    counters = Counters()
    placements = [
        {"slot_id": "a", "ad": {"ad_id": "ad-1"}},
        {"slot_id": "b", "ad": {"ad_id": "ad-2"}},
        {"slot_id": "c", "ad": {"ad_id": "ad-gone"}},  # no longer in the catalogue
        {"slot_id": "d", "ad": None},
    ]
    campaigns = {"ad-1": "cmp-1", "ad-2": "cmp-1"}
    count_placements(counters, "pub-1", placements, campaigns.get)
    assert sorted(counters.take()) == [
        ("ad", "ad-1", "matches", 1),
        ("ad", "ad-2", "matches", 1),
        ("ad", "ad-gone", "matches", 1),
        ("campaign", "cmp-1", "matches", 2),
        ("publisher", "pub-1", "matches", 3),
        ("publisher", "pub-1", "no_matches", 1),
        ("publisher", "pub-1", "requests", 4),
    ]
