"""Migration 0370: a click id is unique within its impression, not across all clicks (an
unsigned partner click id fired first through another signed URL made a genuine click a
silent replay). A database from before keeps its clicks (ids too), their conversions and
charges; the one valid click per impression still holds; replays stay replays."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from edge import ledger
from edge.settings import Settings
from edge.store import Click, ClickConflict, Conversion, open_store
from tests.store.conftest import migrate_only_before, sql

_CLICKS = (
    "SELECT id, click_id, impression_key, kind, env, ad_id, campaign_id, publisher_id,"
    " slot_id, invalid_reason, at FROM clicks ORDER BY id"
)
_CONVERSIONS = "SELECT id, click_row, ad_id, campaign_id, value_usd, at FROM conversions"
_CHARGES = (
    "SELECT id, pricing, click_row, conversion_row, campaign_id, ad_id, amount_usd, at"
    " FROM charges ORDER BY id"
)
_OLD_ROWS = [
    "INSERT INTO clicks (click_id, impression_key, kind, env, ad_id, campaign_id,"
    " publisher_id, slot_id, invalid_reason, at) VALUES"
    " ('clk-1', 'tok:a', 'url', 'production', 'ad-1', 'cmp-1', 'pub-1', 's1', NULL, 5.0),"
    " ('clk-2', 'tok:a', 'url', 'production', 'ad-1', 'cmp-1', 'pub-1', 's1', 'duplicate', 6.0),"
    " ('partner-1', 'ai-c:7:3:c-1:m-1', 'ai', 'production', 'ad-2', NULL, NULL, NULL,"
    "  NULL, 7.0)",
    "INSERT INTO conversions (click_row, ad_id, campaign_id, value_usd, at)"
    " VALUES (1, 'ad-1', 'cmp-1', 12.5, 9.0)",
    "INSERT INTO charges (pricing, click_row, conversion_row, campaign_id, ad_id,"
    " publisher_id, amount_usd, at) VALUES"
    " ('cpc', 1, NULL, 'cmp-1', 'ad-1', 'pub-1', 1.4, 5.0),"
    " ('cpa', 1, 1, 'cmp-1', 'ad-1', 'pub-1', 18.0, 9.0)",
]


def _write(target: Path | str, statements: list[str]) -> None:
    if isinstance(target, Path):
        conn = sqlite3.connect(target)
        try:
            with conn:
                for s in statements:
                    conn.execute(s)
        finally:
            conn.close()
        return
    with psycopg.connect(target) as pg:
        for s in statements:
            pg.execute(s.encode())


def test_clicks_from_before_keep_their_rows_and_rules(db_target, run, monkeypatch):
    migrate_only_before(monkeypatch, "0370")
    old = open_store(Settings(db=db_target))
    run(old.open())
    run(old.close())
    _write(db_target, _OLD_ROWS)
    before = {q: sql(db_target, q) for q in (_CLICKS, _CONVERSIONS, _CHARGES)}
    monkeypatch.undo()  # every shipped migration again

    new = open_store(Settings(db=db_target))
    run(new.open())
    try:
        assert {q: sql(db_target, q) for q in before} == before  # ids and rows as they were
        first = Click(click_id="clk-1", impression_key="tok:a", kind="url", env="production",
                      ad_id="ad-1", campaign_id="cmp-1", at=10.0, publisher_id="pub-1",
                      slot_id="s1", invalid_reason="duplicate")  # fmt: skip
        assert run(ledger.record_click(new, first)) is False  # a replay of a stored click
        valid = Click(**{**_fields(first), "click_id": "clk-3", "invalid_reason": None})
        with pytest.raises(ClickConflict):  # still one valid click per impression
            run(ledger.record_click(new, valid))
        elsewhere = Click(**{**_fields(first), "impression_key": "tok:b", "invalid_reason": None})
        assert run(ledger.record_click(new, elsewhere)) is True  # its own impression's click
        found = run(new.clicks_by_id("clk-1", "production", 5))
        assert [(c.impression_key, c.invalid_reason) for c in found] == [
            ("tok:a", None), ("tok:b", None)]  # fmt: skip
        assert found[0].row == 1
        # the conversion stored before still makes a second one of its click a no-op
        assert run(ledger.record_conversion(new, Conversion(found[0], 11.0))) is False
        assert sql(db_target, _CHARGES) == before[_CHARGES]
    finally:
        run(new.close())


def _fields(obj) -> dict:
    return {f: getattr(obj, f) for f in obj.__dataclass_fields__}
