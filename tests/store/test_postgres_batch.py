"""PostgreSQL writes a run of impressions in one go (``_save_impressions``): the same rows,
counters and answers as writing them one by one, replays inside a run included, and a run
that meets another node's key falls back to one by one."""

from __future__ import annotations

import random

import psycopg
import pytest

from edge import ledger
from edge.store import Impression, PostgresStore
from edge.store import postgres as pg_store
from edge.store.postgres import _Job, _save_impression
from tests.store.conftest import race_for_key, sql


def imp(keys, **kw) -> Impression:
    base = dict(kind="url", env="production", ad_id="ad-1", campaign_id="cmp-1", at=1.0,
                publisher_id="pub-1", cpm_usd=2.0)  # fmt: skip
    return Impression(dedupe_keys=tuple(keys), **{**base, **kw})


def job(i: Impression) -> _Job:
    billed = ledger.billing_usd(i)
    counts = ledger.impression_counts_of_day(i, billed)
    return _Job(_save_impression, (i, billed, counts), savepoint=False)


async def commit(store: PostgresStore, batch: list[_Job]) -> list[object]:
    await store._commit(batch)
    return [j.future.exception() or j.future.result() for j in batch]


def commit_batches(run, url: str, batches: list[list[Impression]]) -> tuple[list, int]:
    """Every batch committed in turn by one store; the answers and how many jobs went
    through the batched form."""
    store = PostgresStore(url)

    async def go():
        await store.open()
        try:
            return [await commit(store, [job(i) for i in b]) for b in batches]
        finally:
            await store.close()

    return run(go()), store.batched


def tables(url: str) -> dict[str, object]:
    """What is stored, with each impression named by its smallest key (ids differ between
    databases written in different ways, what they tie together must not)."""
    names: dict[int, str] = {}
    for key, iid in sql(url, "SELECT dedupe_key, impression_id FROM impression_keys"):
        names[iid] = min(key, names.get(iid, key))
    keys = sorted((k, names[i]) for k, i in sql(url, "SELECT * FROM impression_keys"))
    rows = sql(url, "SELECT id, kind, env, ad_id, campaign_id, publisher_id, post_id, slot_id,"
                    " cpm_usd, at, invalid_reason FROM impressions")  # fmt: skip
    bills = sql(url, "SELECT impression_id, campaign_id, ad_id, publisher_id, amount_usd, at"
                     " FROM billing_events")  # fmt: skip
    return {
        "keys": keys,
        "impressions": sorted((names[r[0]], *r[1:]) for r in rows),
        "billing": sorted((names[r[0]], *r[1:]) for r in bills),
        "counters": sql(url, "SELECT * FROM counters ORDER BY 1, 2, 3"),
        "days": sql(url, "SELECT * FROM daily_counters ORDER BY 1, 2, 3, 4"),
    }


def mixed_traffic(seed: int) -> list[list[Impression]]:
    """Batches of 1 to 40 impressions of a few ads, kinds and envs, some invalid, some
    unpriced; beacons repeat tokens (in the same batch and across batches) and add ids."""
    rnd = random.Random(seed)
    batches: list[list[Impression]] = []
    for b in range(30):
        batch = []
        for _ in range(rnd.randint(1, 40)):
            keys = {f"tok:{rnd.randrange(1500):04d}"}
            if rnd.random() < 0.6:
                keys.add(f"iid:{rnd.randrange(3000):04d}")
            batch.append(
                imp(
                    keys,
                    kind=rnd.choice(["url", "ugc", "ai-render"]),
                    env=rnd.choice(["production", "production", "test"]),
                    ad_id=f"ad-{rnd.randrange(5)}",
                    campaign_id=rnd.choice([None, "cmp-1", "cmp-2"]),
                    publisher_id=rnd.choice([None, "pub-1"]),
                    slot_id=rnd.choice([None, "slot-a"]),
                    post_id=rnd.choice([None, "post-9"]),
                    cpm_usd=rnd.choice([None, 2, 3.5]),
                    invalid_reason=rnd.choice([None, None, None, "datacenter"]),
                    at=1_700_000_000.0 + b * 40_000.0 + rnd.random(),  # several UTC days
                )
            )
        batches.append(batch)
    return batches


def test_a_batch_written_at_once_stores_what_one_by_one_stores(postgres, run, monkeypatch):
    traffic = mixed_traffic(16)
    at_once, one_by_one = postgres.new_database(), postgres.new_database()
    answers, batched = commit_batches(run, at_once, traffic)
    with monkeypatch.context() as m:
        m.setattr(pg_store, "_BATCHED", {})
        reference, unbatched = commit_batches(run, one_by_one, traffic)
    assert unbatched == 0
    assert batched == sum(len(b) for b in traffic if len(b) > 1)
    assert answers == reference
    flat = [a for batch in answers for a in batch]
    assert 0 < flat.count(False) < flat.count(True)  # replays and counted ones both met
    assert tables(at_once) == tables(one_by_one)
    assert sql(at_once, "SELECT count(*) FROM impressions") == [(flat.count(True),)]


def test_replays_inside_one_batch_count_once(postgres, run):
    url = postgres.new_database()
    batch = [
        imp(("tok:a", "iid:1")),
        imp(("tok:b",)),
        imp(("tok:a", "iid:2")),  # replays the first, with an id of its own
        imp(("iid:2", "tok:c")),  # replays the first through that id
        imp(("tok:b",)),  # replays the second, nothing new
    ]
    (answers,), batched = commit_batches(run, url, [batch])
    assert answers == [True, True, False, False, False]
    assert batched == 5
    assert sql(url, "SELECT count(*) FROM impressions") == [(2,)]
    assert sql(url, "SELECT count(*) FROM billing_events") == [(2,)]
    (first,) = sql(url, "SELECT impression_id FROM impression_keys WHERE dedupe_key = 'tok:a'")
    keys = sql(url, "SELECT dedupe_key, impression_id FROM impression_keys ORDER BY 1")
    assert [k for k, i in keys if i == first[0]] == ["iid:1", "iid:2", "tok:a", "tok:c"]
    rows = sql(url, "SELECT amount FROM counters WHERE scope='ad' AND counter='impressions'")
    assert rows == [(2.0,)]
    # Across batches: every key now stored replays, and a new impression still counts.
    (again,), _ = commit_batches(run, url, [[imp(("tok:c",)), imp(("iid:1", "tok:d")),
                                              imp(("tok:e",))]])  # fmt: skip
    assert again == [False, False, True]
    assert sql(url, "SELECT count(*) FROM impressions") == [(3,)]
    assert sql(url, "SELECT impression_id FROM impression_keys WHERE dedupe_key = 'tok:d'") == [
        first
    ]


@pytest.mark.parametrize("bad_at", [0, 3])
def test_one_refused_impression_in_a_batch_fails_alone(postgres, run, bad_at):
    url = postgres.new_database()
    batch = [imp((f"tok:{i}",)) for i in range(5)]
    batch[bad_at] = imp(("tok:bad",), kind="bogus")
    (answers,), batched = commit_batches(run, url, [batch])
    assert isinstance(answers[bad_at], psycopg.errors.CheckViolation)
    assert [a for i, a in enumerate(answers) if i != bad_at] == [True] * 4
    # The batched form failed and was undone, the bad one failed alone, and the batch ran
    # again without it: then the other four at once.
    assert batched == 4
    assert sql(url, "SELECT count(*) FROM impressions") == [(4,)]
    assert sql(url, "SELECT count(*) FROM billing_events") == [(4,)]
    rows = sql(url, "SELECT amount FROM counters WHERE scope='ad' AND counter='impressions'")
    assert rows == [(4.0,)]


def test_a_batch_that_meets_another_nodes_key_is_written_one_by_one(postgres, run):
    """Another node holds a key of the batch uncommitted: the batch's insert waits, and when
    that node commits, the batch is undone and written one by one: the impression with
    that key becomes a replay, the others count."""
    url = postgres.new_database()
    store = PostgresStore(url)

    async def go():
        await store.open()
        try:
            batch = [job(imp(k)) for k in (("tok:1",), ("tok:x", "iid:y"), ("tok:2",))]
            return await race_for_key(url, "tok:x", commit(store, batch))
        finally:
            await store.close()

    winner, answers = run(go())
    assert answers == [True, False, True]
    assert store.batched == 0
    assert sql(url, "SELECT count(*) FROM impressions") == [(3,)]
    assert sql(url, "SELECT count(*) FROM billing_events") == [(2,)]
    keys = dict(sql(url, "SELECT dedupe_key, impression_id FROM impression_keys"))
    assert keys["tok:x"] == keys["iid:y"] == winner
    rows = sql(url, "SELECT amount FROM counters WHERE scope='ad' AND counter='impressions'")
    assert rows == [(2.0,)]
