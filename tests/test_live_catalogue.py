"""Catalogue hot reload: ``edge catalogue load`` stores a validated live version, a running
edge swaps to it without a restart, a bad file changes nothing, a match already running
finishes on the old catalogue, and only new ad texts are embedded."""

from __future__ import annotations

import copy
import json
import sqlite3
from importlib import resources

import numpy as np
import orjson
import pytest

from edge.cli import main
from edge.live_catalogue import retire
from matcher.catalogue import Catalogue, ad_number, load_catalogue, parse_catalogue
from matcher.types import MatchRequest
from tests.conftest import issue_key


def bundled() -> dict:
    raw = resources.files("matcher.data").joinpath("sandbox_catalogue.json").read_bytes()
    return json.loads(raw)


def with_new_campaign(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    fresh = copy.deepcopy(doc["campaigns"][0])
    fresh["id"] = "cmp-hot-reload"
    fresh["advertiser_name"] = "Hot Reload Kayaks"
    for i, ad_set in enumerate(fresh["ad_sets"]):
        ad_set["id"] = f"as-hot-{i}"
        for j, ad in enumerate(ad_set["ads"]):
            ad["id"] = f"ad-hot-{i}-{j}"
            ad["title"] = f"Sea kayak rentals, tour {i}-{j}"
    doc["campaigns"].append(fresh)
    return doc


def campaign_ids(client, key) -> list[str]:
    r = client.get("/v1/ad-manager/campaigns?limit=200", headers={"X-API-Key": key})
    assert r.status_code == 200, r.text
    return [c["id"] for c in r.json()["campaigns"]]


def test_load_then_sync_swaps_demand_and_a_bad_file_changes_nothing(make_client, tmp_path, capsys):
    client = make_client(env="production")
    ctx = client.app.state.ctx
    key = issue_key(client, "ad-manager")
    before = campaign_ids(client, key)
    assert "cmp-hot-reload" not in before
    old = ctx.matcher

    good = tmp_path / "good.json"
    good.write_bytes(orjson.dumps(with_new_campaign(bundled())))
    db = str(ctx.settings.db)
    assert main(["catalogue", "load", str(good), "--db", db]) == 0
    assert "catalogue version 1 is live" in capsys.readouterr().out
    assert client.portal.call(ctx.live_catalogue.sync, ctx) is True
    assert ctx.matcher is not old and ctx.live_catalogue.version == 1
    assert "cmp-hot-reload" in campaign_ids(client, key)

    bad = tmp_path / "bad.json"
    doc = with_new_campaign(bundled())
    doc["campaigns"][0]["status"] = "sometimes"
    bad.write_bytes(orjson.dumps(doc))
    assert main(["catalogue", "load", str(bad), "--db", db]) == 1
    assert "nothing was changed" in capsys.readouterr().err
    assert client.portal.call(ctx.live_catalogue.sync, ctx) is False
    assert ctx.live_catalogue.version == 1
    # The same bad file by SIGHUP's path (the file named by EDGE_CATALOGUE): no change.
    current = ctx.matcher
    assert client.portal.call(ctx.live_catalogue.reload_file, ctx, bad) is False
    assert ctx.matcher is current


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_restored_version_is_what_a_running_edge_swaps_to(
    make_client, tmp_path, capsys, request, backend
):
    # `edge catalogue restore` stores the old version anew; the edge follows it as it
    # follows a load (on PostgreSQL the announcement may have swapped it already: the sync
    # below then only confirms it).
    db = tmp_path / "edge.db"
    if backend == "postgres":
        db = request.getfixturevalue("postgres").new_database()
    client = make_client(env="production", db=db)
    ctx = client.app.state.ctx
    key = issue_key(client, "ad-manager")
    for doc in (bundled(), with_new_campaign(bundled())):  # versions 1 and 2
        path = tmp_path / "catalogue.json"
        path.write_bytes(orjson.dumps(doc))
        assert main(["catalogue", "load", str(path), "--db", str(db)]) == 0
    client.portal.call(ctx.live_catalogue.sync, ctx)
    assert ctx.live_catalogue.version == 2 and "cmp-hot-reload" in campaign_ids(client, key)
    swaps = ctx.live_catalogue.swaps

    assert main(["catalogue", "restore", "1", "--db", str(db)]) == 0
    assert "catalogue version 1 restored as version 3" in capsys.readouterr().out
    client.portal.call(ctx.live_catalogue.sync, ctx)
    assert ctx.live_catalogue.version == 3 and ctx.live_catalogue.swaps == swaps + 1
    assert "cmp-hot-reload" not in campaign_ids(client, key)


def test_sighup_keeps_the_stored_live_version_over_the_file(make_client, tmp_path, caplog):
    # With a live version in the store, SIGHUP does not serve the file (the next poll
    # would swap back to the stored version): it keeps that version and says why.
    client = make_client(env="production")
    ctx = client.app.state.ctx
    stored = tmp_path / "stored.json"
    stored.write_bytes(orjson.dumps(with_new_campaign(bundled())))
    assert main(["catalogue", "load", str(stored), "--db", str(ctx.settings.db)]) == 0
    assert client.portal.call(ctx.live_catalogue.sync, ctx) is True
    served = ctx.matcher
    path = tmp_path / "file.json"
    path.write_bytes(orjson.dumps(bundled()))
    with caplog.at_level("WARNING", logger="edge.catalogue"):
        assert client.portal.call(ctx.live_catalogue.reload, ctx, path) is False
    assert ctx.matcher is served and ctx.live_catalogue.version == 1
    assert "SIGHUP does not reload" in caplog.text and "edge catalogue load" in caplog.text


def test_sighup_with_the_file_the_live_version_holds_has_nothing_to_advise(
    make_client, tmp_path, caplog
):
    # The operator loaded the file the edge started with: the version is logged live on
    # the first sync, and SIGHUP does not tell them to load what is already live.
    client = make_client(env="production")
    ctx = client.app.state.ctx
    path = tmp_path / "file.json"
    path.write_bytes(orjson.dumps(bundled()))  # what the edge serves already
    assert main(["catalogue", "load", str(path), "--db", str(ctx.settings.db)]) == 0
    with caplog.at_level("INFO", logger="edge.catalogue"):
        assert client.portal.call(ctx.live_catalogue.sync, ctx) is False  # nothing to swap
        assert "catalogue version 1 live: the content already served" in caplog.text
        caplog.clear()
        assert client.portal.call(ctx.live_catalogue.reload, ctx, path) is False
    assert "nothing to reload" in caplog.text and "does not reload" not in caplog.text


def test_sighup_reloads_the_file_without_a_stored_version(make_client, tmp_path):
    client = make_client(env="production")
    ctx = client.app.state.ctx
    path = tmp_path / "file.json"
    path.write_bytes(orjson.dumps(with_new_campaign(bundled())))
    assert client.portal.call(ctx.live_catalogue.reload, ctx, path) is True
    assert ctx.matcher.catalogue.campaign("cmp-hot-reload") is not None
    assert ctx.live_catalogue.version is None


def test_sighup_without_a_file_says_so_and_looks_for_a_new_live_version(
    make_client, tmp_path, caplog
):
    client = make_client(env="production")
    ctx = client.app.state.ctx
    assert ctx.settings.catalogue is None
    stored = tmp_path / "stored.json"
    stored.write_bytes(orjson.dumps(with_new_campaign(bundled())))
    assert main(["catalogue", "load", str(stored), "--db", str(ctx.settings.db)]) == 0
    with caplog.at_level("WARNING", logger="edge.catalogue"):
        assert client.portal.call(ctx.live_catalogue.hangup, ctx) is True  # now, not at a poll
    assert ctx.live_catalogue.version == 1
    assert ctx.matcher.catalogue.campaign("cmp-hot-reload") is not None
    assert "no catalogue file to re-read" in caplog.text


def test_start_without_a_file_still_takes_sighup(tmp_path):
    import asyncio
    import signal
    from types import SimpleNamespace

    from edge.live_catalogue import LiveCatalogue
    from edge.settings import Settings

    settings = Settings(env="production", db=tmp_path / "edge.db")
    live = LiveCatalogue()
    handlers = []

    async def go():
        live.start(SimpleNamespace(settings=settings))  # the loop's thread owns SIGHUP here
        handlers.append(signal.getsignal(signal.SIGHUP))
        await live.stop()
        handlers.append(signal.getsignal(signal.SIGHUP))

    before = signal.getsignal(signal.SIGHUP)
    asyncio.run(go())
    # Taken while serving (a SIGHUP is answered in the log, not ignored unsaid), given back
    # on stop.
    assert handlers[0] not in (signal.SIG_DFL, signal.SIG_IGN, None, before)
    assert handlers[1] == before


def test_a_match_running_on_the_old_catalogue_finishes_on_it(make_client, shared_matcher):
    client = make_client(env="production")
    ctx = client.app.state.ctx
    old = ctx.matcher
    doc = bundled()
    doc["campaigns"] = [c for c in doc["campaigns"] if c["id"] != "cmp-happy-hound"]
    catalogue = parse_catalogue(orjson.dumps(doc))

    async def race():
        from edge.matching import StoreMatchState

        request = MatchRequest(
            product="ugc", content="my dog will not eat his dry food, what fresh food helps?",
            post_id="p-race", thread_id="p-race",
        )  # fmt: skip
        state = StoreMatchState(ctx.store, ctx.state_writes)
        running = old.match(request, state, ctx.clock())
        swapped = await ctx.live_catalogue.swap(ctx, catalogue, None)
        return swapped, await running

    swapped, result = client.portal.call(race)
    assert swapped and ctx.matcher is not old
    assert [a.placement.campaign.id for a in result.ads][:1] == ["cmp-happy-hound"]
    assert ctx.matcher.catalogue.campaign("cmp-happy-hound") is None


def test_only_new_ad_texts_are_embedded(shared_matcher, tmp_path, monkeypatch):
    doc = with_new_campaign(bundled())
    catalogue = parse_catalogue(orjson.dumps(doc))
    raw = shared_matcher.embedder.inner
    seen: list[int] = []
    real = raw.embed

    def counting(texts):
        seen.append(len(texts))
        return real(texts)

    monkeypatch.setattr(raw, "embed", counting)
    fresh = shared_matcher.with_catalogue(catalogue, tmp_path)
    new_ads = sum(len(s["ads"]) for s in doc["campaigns"][-1]["ad_sets"])
    assert seen == [new_ads]
    rows = {p.ad.id: i for i, p in enumerate(catalogue.placements)}
    old_rows = {p.ad.id: i for i, p in enumerate(shared_matcher.catalogue.placements)}
    same = "ad-dog-food"
    assert np.array_equal(fresh.ad_vectors[rows[same]], shared_matcher.ad_vectors[old_rows[same]])
    # A second load of the same catalogue reads the vector cache: nothing is embedded.
    shared_matcher.with_catalogue(catalogue, tmp_path)
    assert seen == [new_ads]


@pytest.mark.parametrize("argv_tail", [["--json"], []])
def test_load_refuses_an_unreadable_file(tmp_path, capsys, argv_tail):
    db = tmp_path / "edge.db"
    assert main(["catalogue", "load", str(tmp_path / "missing.json"), "--db", str(db),
                 *argv_tail]) == 1  # fmt: skip
    assert not db.exists()  # nothing opened, nothing stored


def test_load_keeps_only_the_history_asked_for(tmp_path, capsys):
    good = tmp_path / "good.json"
    db = str(tmp_path / "edge.db")
    for doc in (bundled(), with_new_campaign(bundled()), bundled()):
        good.write_bytes(orjson.dumps(doc))
        assert main(["catalogue", "load", str(good), "--db", db, "--catalogue-history", "1"]) == 0
    capsys.readouterr()
    with sqlite3.connect(db) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM catalogue_versions")]
    assert versions == [2, 3]  # the live one and one before it


@pytest.mark.parametrize(
    ("noted", "rewritten", "reread"),
    [
        (True, False, False),  # loaded from the file, which did not change: nothing to do
        (True, True, True),  # the file changed while the process started: catch up
        (False, False, True),  # the served catalogue did not come from the file: catch up
    ],
)
def test_start_rereads_the_catalogue_file_only_if_it_changed(tmp_path, noted, rewritten, reread):
    import asyncio
    import os
    from types import SimpleNamespace

    from edge.live_catalogue import LiveCatalogue
    from edge.settings import Settings

    path = tmp_path / "catalogue.json"
    path.write_bytes(orjson.dumps(bundled()))
    settings = Settings(env="production", catalogue=path, db=tmp_path / "edge.db")
    live = LiveCatalogue()
    reads = []

    async def reload_file(ctx, p):
        reads.append(p)
        return False

    live.reload_file = reload_file
    if noted:
        live.note_file(path)
    if rewritten:
        path.write_bytes(orjson.dumps(with_new_campaign(bundled())))
        os.utime(path, ns=(1, 1))  # a new mtime even on a coarse clock

    async def go():
        live.start(SimpleNamespace(settings=settings))  # the loop's thread owns SIGHUP here
        await asyncio.sleep(0.05)  # the catch-up task, if any, runs
        await live.stop()

    asyncio.run(go())
    assert reads == ([path] if reread else [])


@pytest.mark.parametrize("same", [False, True])
def test_a_catalogue_file_the_stored_one_overrides_is_named_at_start(
    make_client, tmp_path, capsys, caplog, same
):
    # The stored live version wins over --catalogue; when they differ the log says so and
    # how to serve the file instead.
    stored = tmp_path / "stored.json"
    stored.write_bytes(orjson.dumps(bundled() if same else with_new_campaign(bundled())))
    assert main(["catalogue", "load", str(stored), "--db", str(tmp_path / "edge.db")]) == 0
    capsys.readouterr()
    path = tmp_path / "file.json"
    path.write_bytes(orjson.dumps(bundled()))  # what the shared matcher serves
    with caplog.at_level("WARNING", logger="edge.catalogue"):
        client = make_client(env="production", catalogue=path)
    ctx = client.app.state.ctx
    assert ctx.live_catalogue.version == 1
    warnings = [r.getMessage() for r in caplog.records if "is not served" in r.getMessage()]
    if same:
        assert warnings == []
        return
    assert ctx.matcher.catalogue.campaign("cmp-hot-reload") is not None  # the stored one
    (warning,) = warnings
    assert f"EDGE_CATALOGUE (--catalogue) {path} is not served" in warning
    assert "live catalogue version 1" in warning
    assert f"`edge catalogue load {path}`" in warning


def test_ads_gone_from_the_live_catalogue_are_remembered_until_they_come_back():
    full = load_catalogue(None)
    first = full.campaigns[0]
    fewer = Catalogue([c for c in full.campaigns if c.id != first.id])
    retired = retire({}, full, fewer)
    gone = {p.ad.id for p in full.placements if p.campaign.id == first.id}
    assert gone and {v[0] for v in retired.values()} == gone
    for ad in gone:
        assert retired[ad_number(ad)] == (ad, first.id)
    assert retire(retired, fewer, full) == {}  # the campaign is back: its ads are live again
