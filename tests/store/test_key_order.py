"""Dedupe keys that sort by time: a token id starts with its issue time and the tag's
impression id with the page's clock, so the keys of beacons that arrive together share the
recent end of the key index; keys stored before, random throughout, keep deduping beside
them (a token's key never changes: it is its signed id)."""

import secrets
import uuid

import pytest

from bench.ingest import tag_impression_id
from edge import ledger
from edge.beacons import issue_impression_token, read_impression_token, token_id
from edge.counters import utc_day
from edge.signing import Signer
from edge.store import Impression
from tests.store.conftest import migrate_only_before, record_before_0360, sql


def test_token_ids_sort_by_their_issue_time():
    times = [
        1_790_000_000.0,
        1_790_000_000.000001,  # a microsecond later
        1_790_000_000.5,
        1_790_000_001.0,
        1_800_000_000.25,
        4_000_000_000.0,  # past 2096: the prefix keeps its width
    ]
    ids = [token_id(t) for _ in range(3) for t in times]
    by_time = sorted(range(len(ids)), key=lambda i: (times[i % len(times)], ids[i]))
    assert sorted(ids) == [ids[i] for i in by_time]
    assert {len(i) for i in ids} == {29}  # 13 hex digits of time, 16 of random text
    assert len(set(ids)) == len(ids)


def test_a_token_read_back_keeps_the_id_it_was_issued_with():
    signer = Signer(secrets.token_bytes(32))
    now = 1_790_000_123.456789
    token, issued = issue_impression_token(
        signer, surface="url", env="production", ad_id="ad-1", campaign_id="cmp-1", now=now
    )
    claims = read_impression_token(signer, token, surface="url", env="production", now=now + 5)
    assert claims.token_id == issued.token_id
    assert claims.token_id.startswith(f"{int(now * 1_000_000):013x}")
    assert claims.issued_at == int(now)


def _imp(keys: tuple[str, ...], at: float) -> Impression:
    return Impression(
        kind="url", dedupe_keys=keys, env="production", ad_id="ad-1", campaign_id="cmp-1",
        at=at, publisher_id="pub-1", cpm_usd=2.0,
    )  # fmt: skip


def test_keys_stored_random_keep_deduping_beside_time_ordered_ones(store, run):
    # Stored before ids started with their time: random token ids and tag ids.
    before = [(f"tok:{secrets.token_urlsafe(12)}", f"iid:{uuid.uuid4()}") for _ in range(40)]
    for i, keys in enumerate(before):
        assert run(ledger.record_impression(store, _imp(keys, 1_790_000_000.0 + i))) is True
    # Issued and sent since, in time order.
    now = 1_790_000_100.0
    after = [
        (f"tok:{token_id(now + i / 7)}", f"iid:{tag_impression_id(now + 1 + i / 7)}")
        for i in range(40)
    ]
    for keys in after:
        assert run(ledger.record_impression(store, _imp(keys, now + 2))) is True
    for tok, iid in before + after:
        fresh_tok = f"tok:{token_id(now + 50)}"
        fresh_iid = f"iid:{tag_impression_id(now + 50)}"
        assert run(ledger.record_impression(store, _imp((tok, fresh_iid), now + 60))) is False
        assert run(ledger.record_impression(store, _imp((fresh_tok, iid), now + 60))) is False
        assert run(store.stored_impression(tok)) is not None
    assert run(store.impression_count()) == 80
    assert set(run(store.impressions_by_tag_id([iid[4:] for _, iid in after]))) == {
        iid[4:] for _, iid in after
    }


def test_billing_rows_keyed_by_impression_after_migration(db_target, loop, run, monkeypatch):
    """A database of the schema before billing rows were keyed by their impression, with
    impressions stored: migrated, its rows are all kept, replays of its impressions are
    replays, and new impressions bill once each."""
    from edge.settings import Settings
    from edge.store import open_store

    migrate_only_before(monkeypatch, "0310")
    old = open_store(Settings(db=db_target))
    run(old.open())
    stored = [(f"tok:{secrets.token_urlsafe(12)}", f"iid:{uuid.uuid4()}") for _ in range(30)]
    for i, keys in enumerate(stored):
        record_before_0360(db_target, old, run, _imp(keys, 1_790_000_000.0 + i))
    run(old.close())
    before = sql(db_target, "SELECT impression_id, amount_usd, at FROM billing_events")
    assert len(before) == 30
    monkeypatch.undo()  # every shipped migration again

    new = open_store(Settings(db=db_target))
    run(new.open())
    try:
        after = sql(db_target, "SELECT impression_id, amount_usd, at FROM billing_events")
        assert sorted(after) == sorted(before)
        for tok, iid in stored:
            replay = _imp((tok, f"iid:{uuid.uuid4()}"), 1_790_000_100.0)
            assert run(ledger.record_impression(new, replay)) is False
            replay = _imp((f"tok:{token_id(1_790_000_100.0)}", iid), 1_790_000_100.0)
            assert run(ledger.record_impression(new, replay)) is False
        fresh = [(f"tok:{token_id(1_790_000_200.0 + i)}", f"iid:{i:08d}") for i in range(5)]
        for keys in fresh:
            assert run(ledger.record_impression(new, _imp(keys, 1_790_000_300.0))) is True
        [(count, total)] = sql(db_target, "SELECT count(*), sum(amount_usd) FROM billing_events")
        assert count == 35 and total == pytest.approx(35 * 2.0 / 1000)
        spent = run(new.spend_on_day(utc_day(1_790_000_300.0)))
        assert spent == {"cmp-1": pytest.approx(35 * 2.0 / 1000)}
        assert run(new.impression_count()) == 35
    finally:
        run(new.close())
