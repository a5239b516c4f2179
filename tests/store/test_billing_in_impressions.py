"""Migration 0360: what an impression bills is a column of its row (``billed_usd``) and
``billing_events`` a view of the billed rows. A database from before keeps its impressions,
keys and billing rows (the view reads the same rows the table held), replays stay replays,
and new impressions bill once each, in their row, through the one-by-one and the batched
writes alike."""

from __future__ import annotations

import secrets
import sqlite3
import uuid

import pytest

from edge import ledger
from edge.settings import Settings
from edge.store import Impression, migrations, open_store
from tests.store.conftest import migrate_only_before, record_before_0360, sql

_IMPRESSIONS = (
    "SELECT id, kind, env, ad_id, campaign_id, publisher_id, post_id, slot_id, cpm_usd, at,"
    " invalid_reason FROM impressions ORDER BY id"
)
_KEYS = "SELECT dedupe_key, impression_id FROM impression_keys ORDER BY 1"
_BILLING = (
    "SELECT impression_id, campaign_id, ad_id, publisher_id, amount_usd, at"
    " FROM billing_events ORDER BY 1"
)


def _imp(keys: tuple[str, ...], at: float, **kw) -> Impression:
    base = dict(kind="url", env="production", ad_id="ad-1", campaign_id="cmp-1",
                publisher_id="pub-1", cpm_usd=2.0)  # fmt: skip
    return Impression(dedupe_keys=keys, at=at, **{**base, **kw})


def _varied(i: int) -> dict:
    """Billed, invalid, without a price, in the sandbox, without a campaign, by turns."""
    return [
        {},
        {"invalid_reason": "datacenter"},
        {"cpm_usd": None},
        {"env": "sandbox"},
        {"campaign_id": None, "publisher_id": None, "cpm_usd": 3.5, "ad_id": f"ad-{i}"},
    ][i % 5]


def test_billing_rows_move_into_their_impressions(db_target, run, monkeypatch):
    migrate_only_before(monkeypatch, "0360")
    old = open_store(Settings(db=db_target))
    run(old.open())
    stored = [(f"tok:{secrets.token_urlsafe(12)}", f"iid:{uuid.uuid4()}") for _ in range(25)]
    for i, keys in enumerate(stored):
        record_before_0360(db_target, old, run, _imp(keys, 1_790_000_000.0 + i, **_varied(i)))
    run(old.close())
    before = {q: sql(db_target, q) for q in (_IMPRESSIONS, _KEYS, _BILLING)}
    assert len(before[_IMPRESSIONS]) == 25 and len(before[_BILLING]) == 10
    monkeypatch.undo()  # every shipped migration again

    new = open_store(Settings(db=db_target))
    run(new.open())
    try:
        assert {q: sql(db_target, q) for q in before} == before
        billed = sql(db_target, "SELECT id, billed_usd FROM impressions ORDER BY id")
        amounts = {row[0]: row[4] for row in before[_BILLING]}
        assert billed == [(row[0], amounts.get(row[0])) for row in before[_IMPRESSIONS]]
        for tok, iid in stored:
            replay = _imp((tok, f"iid:{uuid.uuid4()}"), 1_790_000_100.0)
            assert run(ledger.record_impression(new, replay)) is False
            replay = _imp((f"tok:{secrets.token_urlsafe(12)}", iid), 1_790_000_100.0)
            assert run(ledger.record_impression(new, replay)) is False
        assert sql(db_target, _BILLING) == before[_BILLING]  # a replay bills nothing
        fresh = [_imp((f"tok:new-{i}",), 1_790_000_200.0 + i, **_varied(i)) for i in range(10)]
        for imp in fresh:
            assert run(ledger.record_impression(new, imp)) is True
        rows = sql(db_target, _BILLING)
        assert rows[: len(before[_BILLING])] == before[_BILLING]
        added = [(r[2], r[4], r[5]) for r in rows[len(before[_BILLING]) :]]
        assert added == [
            (imp.ad_id, ledger.billing_usd(imp), imp.at)
            for imp in fresh
            if ledger.billing_usd(imp) is not None
        ]
        assert len(added) == 4
        assert run(new.impression_count()) == 35
    finally:
        run(new.close())


def test_a_batched_run_bills_in_the_rows_as_one_by_one_does(db_target, run):
    """Impressions written together (one group commit) bill what the same impressions
    written one at a time bill: the same view rows, in the impressions' own rows."""
    store = open_store(Settings(db=db_target))
    run(store.open())
    try:
        imps = [_imp((f"tok:b{i}", f"iid:b{i}"), 1_790_000_000.0 + i, **_varied(i))
                for i in range(20)]  # fmt: skip

        async def together() -> list[bool]:
            import asyncio

            return list(await asyncio.gather(*(ledger.record_impression(store, i) for i in imps)))

        assert run(together()) == [True] * 20
        for i, imp in enumerate(imps):
            one = _imp((f"tok:o{i}",), imp.at, **_varied(i))
            assert run(ledger.record_impression(store, one)) is True
        rows = sql(db_target, _BILLING)
        by_keys = sql(
            db_target,
            "SELECT k.dedupe_key, i.billed_usd FROM impression_keys k"
            " JOIN impressions i ON i.id = k.impression_id WHERE k.dedupe_key LIKE 'tok:%'",
        )
        billed = dict(by_keys)
        for i, imp in enumerate(imps):
            assert billed[f"tok:b{i}"] == billed[f"tok:o{i}"] == ledger.billing_usd(imp)
        assert len(rows) == 2 * 8
    finally:
        run(store.close())


def test_a_negative_bill_is_refused(tmp_path):
    """The amount keeps the billing rows' check (never below zero)."""
    conn = sqlite3.connect(tmp_path / "e.db", isolation_level=None)
    migrations.apply_migrations(conn)
    row = "INSERT INTO impressions (kind, env, ad_id, at, billed_usd) VALUES (?, ?, ?, ?, ?)"
    conn.execute(row, ("url", "production", "ad-1", 1.0, 0.0))
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute(row, ("url", "production", "ad-1", 1.0, -0.001))
