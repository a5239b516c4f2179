"""What the routes count: a /dea match answer per publisher, ad and campaign."""

from edge.counters import CountBuffer, Counters, count_placements


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


def test_a_buffer_sums_each_counter_of_totals_and_days_once_taken():
    buffer = CountBuffer()
    rows = [
        ("ad", "ad-1", "impressions", 1),
        ("ad", "ad-1", "billable_usd", 0.25),
        ("2026-11-26", "ad", "ad-1", "impressions", 1),
    ]
    for _ in range(5):
        buffer.extend(rows)
    buffer.add("ad", "ad-1", "billable_usd", 0.5)  # another amount of the same counter
    buffer.add("ad", "ad-2", "impressions", 3)
    mark = buffer.mark()
    buffer.add("ad", "ad-1", "impressions", 100)
    buffer.drop_since(mark)
    assert sorted(buffer.take(), key=str) == sorted(
        [
            ("ad", "ad-1", "impressions", 5),
            ("ad", "ad-1", "billable_usd", 1.75),
            ("ad", "ad-2", "impressions", 3),
            ("2026-11-26", "ad", "ad-1", "impressions", 5),
        ],
        key=str,
    )
    assert buffer.take() == [] and len(buffer) == 0
