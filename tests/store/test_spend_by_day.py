"""Today's spend per campaign from the day buckets (migration 0330): a database migrated
with billing rows of today that its buckets lack gets them made whole, no bucket goes down,
rows are kept, and the time indexes that only the old query read are gone."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edge import ledger
from edge.counters import utc_day
from edge.settings import Settings
from edge.store import Click, Impression, open_store
from tests.store.conftest import (
    migrate_only_before,
    record_before_0360,
    record_click_before_0370,
    sql,
)


def _imp(key: str, at: float, campaign_id: str, cpm_usd: float) -> Impression:
    return Impression(
        kind="url", dedupe_keys=(key,), env="production", ad_id="ad-1",
        campaign_id=campaign_id, at=at, publisher_id="pub-1", cpm_usd=cpm_usd,
    )  # fmt: skip


def _indexes(target: Path | str) -> set[str]:
    if isinstance(target, Path):
        rows = sql(target, "SELECT name FROM sqlite_master WHERE type = 'index'")
    else:
        rows = sql(target, "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")
    return {r[0] for r in rows}


def test_todays_buckets_made_whole_and_the_time_indexes_dropped(db_target, run, monkeypatch):
    migrate_only_before(monkeypatch, "0330")
    now = time.time()
    today, yesterday = utc_day(now), utc_day(now - 86_400)
    old = open_store(Settings(db=db_target))
    run(old.open())
    # Today: cmp-1 bills 0.004 + a 0.5 click, cmp-2 0.002; yesterday cmp-1 0.001.
    record_before_0360(db_target, old, run, _imp("tok:a", now, "cmp-1", 4.0))
    record_before_0360(db_target, old, run, _imp("tok:b", now, "cmp-2", 2.0))
    record_before_0360(db_target, old, run, _imp("tok:c", now - 86_400, "cmp-1", 1.0))
    record_before_0360(db_target, old, run, _imp("tok:e", now, "cmp-3", 3.0))
    click = Click(click_id="k1", impression_key="tok:a", kind="url", env="production",
                  ad_id="ad-1", campaign_id="cmp-1", at=now, publisher_id="pub-1",
                  charge_usd=0.5)  # fmt: skip
    record_click_before_0370(db_target, old, run, click)
    run(old.close())
    # As if today's billing had come before the buckets existed: cmp-2's bucket is missing
    # and cmp-1's holds only part of it; cmp-3's is above what the rows say (another
    # process's bump racing the migration, or rounding): a bucket is never lowered.
    bucket = f"UPDATE daily_counters SET amount = %s WHERE day = '{today}'"
    bucket += " AND scope = 'campaign' AND scope_id = '%s' AND counter = 'billable_usd'"
    for statement in (
        f"DELETE FROM daily_counters WHERE day = '{today}' AND scope_id = 'cmp-2'",
        bucket % ("0.5", "cmp-1"),
        bucket % ("9.0", "cmp-3"),
    ):
        _execute(db_target, statement)
    assert {"billing_events_at", "charges_at"} <= _indexes(db_target)
    monkeypatch.undo()  # every shipped migration again

    new = open_store(Settings(db=db_target))
    run(new.open())
    try:
        spent = {"cmp-1": 0.504, "cmp-2": 0.002, "cmp-3": 9.0}
        assert run(new.spend_on_day(today)) == pytest.approx(spent)
        assert run(new.spend_on_day(yesterday)) == pytest.approx({"cmp-1": 0.001})
        assert sql(db_target, "SELECT count(*) FROM billing_events") == [(4,)]
        assert sql(db_target, "SELECT count(*) FROM charges") == [(1,)]
        assert not {"billing_events_at", "charges_at"} & _indexes(db_target)
        # New billing adds to the buckets as before.
        assert run(ledger.record_impression(new, _imp("tok:d", now, "cmp-2", 6.0)))
        spent["cmp-2"] = 0.008
        assert run(new.spend_on_day(today)) == pytest.approx(spent)
    finally:
        run(new.close())


def _execute(target: Path | str, statement: str) -> None:
    if isinstance(target, Path):
        import sqlite3

        conn = sqlite3.connect(target)
        try:
            conn.execute(statement)
            conn.commit()
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(target) as pg:
        pg.execute(statement.encode())
