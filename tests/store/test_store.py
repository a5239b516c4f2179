"""What every backend does the same: keys, meta, group commit, failures kept to their own
write, a closed store, data surviving a reopen. Runs on SQLite and PostgreSQL."""

import asyncio
import threading

import pytest

from edge.settings import Settings
from edge.store import (
    CatalogueVersion,
    KeyRecord,
    PostgresStore,
    StoreUnavailable,
    TagVersionRecord,
    open_store,
)


def _record(key_id="key_a", lookup="l" * 24, **kw) -> KeyRecord:
    base = dict(
        key_id=key_id,
        lookup=lookup,
        key_hash="h" * 64,
        env="production",
        product="ugc",
        name="",
        created_at=1.0,
    )
    return KeyRecord(**{**base, **kw})


def test_data_survives_reopen(db_target, run):
    s = open_store(Settings(db=db_target))
    run(s.open())
    run(s.insert_key(_record()))
    run(s.close())
    s2 = open_store(Settings(db=db_target))
    run(s2.open())
    try:
        assert run(s2.key_by_id("key_a")).lookup == "l" * 24
        assert run(s2.key_by_lookup("l" * 24)).key_id == "key_a"
        assert run(s2.key_by_lookup("x" * 24)) is None
    finally:
        run(s2.close())


def test_group_commit_shares_transactions(store, run):
    async def burst():
        await asyncio.gather(
            *(store.insert_key(_record(f"key_{i}", f"{i:024d}")) for i in range(300))
        )

    run(burst())
    batches, jobs = store.group_commit_stats
    assert jobs == 300
    assert batches < 300  # many writes shared one commit
    assert len(run(store.list_keys())) == 300


def _hold_and_fail_jobs(store, entered, release):
    """Two write jobs in the backend's form: one that holds the writer until released, one
    that writes a key row and then fails."""
    insert = (
        "INSERT INTO api_keys (key_id, lookup, key_hash, env, product, name, created_at) "
        "VALUES ('key_2', {p}, 'h', 'production', 'ugc', '', 1.0)"
    )
    if isinstance(store, PostgresStore):

        async def pg_hold(w):
            entered.set()
            await asyncio.to_thread(release.wait, 5)

        async def pg_fail(w):
            await w.conn.execute(insert.format(p="%s"), ("2" * 24,))
            raise ValueError("this job fails after writing")

        return pg_hold, pg_fail

    def hold(conn):
        entered.set()
        release.wait(5)

    def fail(conn):
        conn.execute(insert.format(p="?"), ("2" * 24,))
        raise ValueError("this job fails after writing")

    return hold, fail


def test_a_failing_write_does_not_spoil_its_batch(store, run):
    # The three writes are forced into one batch (one transaction): the writer is held
    # inside an earlier job while they queue, so it takes all three at once when released.
    # The middle one writes a row and then fails: its savepoint must undo that row alone.
    entered, release = threading.Event(), threading.Event()
    hold, insert_then_fail = _hold_and_fail_jobs(store, entered, release)

    async def burst():
        before = store.group_commit_stats
        held = asyncio.ensure_future(store.write(hold))
        await asyncio.to_thread(entered.wait, 5)  # its batch (itself alone) is running
        jobs = [
            asyncio.ensure_future(store.insert_key(_record("key_1", "1" * 24))),
            asyncio.ensure_future(store.write(insert_then_fail)),
            asyncio.ensure_future(store.insert_key(_record("key_3", "3" * 24))),
        ]
        await asyncio.sleep(0.05)  # each job is queued behind the held one
        release.set()
        await held
        results = await asyncio.gather(*jobs, return_exceptions=True)
        return before, results

    before, results = run(burst())
    batches, jobs = store.group_commit_stats
    # Two commits for four writes: the held job's, then one for all three.
    assert (batches - before[0], jobs - before[1]) == (2, 4)
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], ValueError)
    ids = [r.key_id for r in run(store.list_keys())]
    assert ids == ["key_1", "key_3"]


def test_closed_store_refuses_work(db_target, run):
    s = open_store(Settings(db=db_target))
    with pytest.raises(StoreUnavailable):
        run(s.list_keys())


def test_an_ended_session_is_kept_until_it_would_have_expired(store, run):
    run(store.end_session("s-1", expires_at=100.0, now=10.0))
    run(store.end_session("s-1", expires_at=100.0, now=11.0))  # a second sign-out: no error
    run(store.end_session("s-2", expires_at=50.0, now=12.0))
    assert run(store.session_ended("s-1")) and run(store.session_ended("s-2"))
    assert not run(store.session_ended("s-3"))
    run(store.end_session("s-3", expires_at=200.0, now=60.0))  # s-2 has expired: forgotten
    assert run(store.session_ended("s-1")) and not run(store.session_ended("s-2"))


def test_meta_put_if_absent_keeps_the_first_value(store, run):
    assert run(store.put_meta_if_absent("k", b"one")) == b"one"
    assert run(store.put_meta_if_absent("k", b"two")) == b"one"
    assert run(store.get_meta("k")) == b"one"
    assert run(store.get_meta("missing")) is None


def test_rotate_is_atomic_and_refuses_a_non_primary(store, run):
    run(store.insert_key(_record("key_old", "o" * 24)))
    new = _record("key_new", "n" * 24)
    assert run(store.rotate_key("key_old", new, 100.0, now=2.0))
    old = run(store.key_by_id("key_old"))
    assert old.expires_at == 100.0 and old.replaced_by == "key_new"
    again = _record("key_newer", "x" * 24)
    assert not run(store.rotate_key("key_old", again, 200.0, now=3.0))
    assert run(store.key_by_id("key_newer")) is None


def test_revoke_once(store, run):
    run(store.insert_key(_record()))
    assert run(store.revoke_key("key_a", 5.0)) is True
    assert run(store.revoke_key("key_a", 6.0)) is False
    assert run(store.revoke_key("nope", 6.0)) is False
    assert run(store.key_by_id("key_a")).revoked_at == 5.0


def test_a_cancelled_caller_still_gets_its_write_and_the_writer_lives(store, run):
    async def go():
        doomed = asyncio.ensure_future(store.insert_key(_record("key_c", "c" * 24)))
        await asyncio.sleep(0)
        doomed.cancel()
        await asyncio.sleep(0.2)
        await store.insert_key(_record("key_d", "d" * 24))
        return doomed.cancelled()

    assert run(go())
    assert [r.key_id for r in run(store.list_keys())] == ["key_c", "key_d"]


def test_key_families_and_rotation_that_ends_older_secondaries(store, run):
    run(store.insert_key(_record("key_1", "1" * 24)))
    run(store.rotate_key("key_1", _record("key_2", "2" * 24, family_id="key_1"), 100.0, now=2.0))
    # The next rotation ends key_1's secondary at once (the caller's choice).
    new = _record("key_3", "3" * 24, family_id="key_1")
    assert run(store.rotate_key("key_2", new, 200.0, now=5.0, expire_key_ids=("key_1",)))
    fam = run(store.keys_in_family("key_1"))
    assert [k.key_id for k in fam] == ["key_1", "key_2", "key_3"]
    assert [k.expires_at for k in fam] == [5.0, 200.0, None]
    assert run(store.keys_in_family("key_9")) == []


def test_tag_versions_keep_bytes_and_first_build_time(store, run):
    assert run(store.tag_versions()) == []
    assert run(store.put_tag_version("1.0.0-aaa", b"A();", "sha384-A", 10.0)) == 10.0
    assert run(store.put_tag_version("1.0.0-bbb", b"B();", "sha384-B", 20.0)) == 20.0
    # Built again by a restart (or another node): the first build time and bytes stay.
    assert run(store.put_tag_version("1.0.0-aaa", b"other", "sha384-X", 30.0)) == 10.0
    assert run(store.tag_versions()) == [
        TagVersionRecord("1.0.0-aaa", "sha384-A", 10.0),
        TagVersionRecord("1.0.0-bbb", "sha384-B", 20.0),
    ]
    assert run(store.tag_version_body("1.0.0-aaa")) == b"A();"
    assert run(store.tag_version_body("1.0.0-zzz")) is None


def test_catalogue_versions_the_newest_is_live(store, run):
    assert run(store.live_catalogue()) is None
    one = run(store.put_catalogue("h1", b'{"campaigns": []}', 1.0, keep_previous=10))
    two = run(store.put_catalogue("h2", b'{"campaigns": [1]}', 2.0, keep_previous=10))
    assert two > one
    assert run(store.live_catalogue()) == (two, "h2")
    assert run(store.catalogue_body(one)) == b'{"campaigns": []}'
    assert run(store.catalogue_body(two + 100)) is None


def test_loading_a_catalogue_keeps_the_live_one_and_the_previous_ones_asked_for(store, run):
    versions = [
        run(store.put_catalogue(f"h{i}", b"{}", float(i), keep_previous=2)) for i in range(5)
    ]
    assert run(store.live_catalogue()) == (versions[-1], "h4")
    kept = [v for v in versions if run(store.catalogue_body(v)) is not None]
    assert kept == versions[-3:]  # the live one and two before it
    last = run(store.put_catalogue("h5", b"{}", 5.0, keep_previous=0))
    assert [v for v in [*versions, last] if run(store.catalogue_body(v)) is not None] == [last]


def test_catalogue_versions_are_listed_newest_first_without_their_bodies(store, run):
    assert run(store.catalogue_versions()) == []
    one = run(store.put_catalogue("h1", b'{"campaigns": []}', 1.0, keep_previous=1))
    two = run(store.put_catalogue("h2", b'{"campaigns": [1]}', 2.5, keep_previous=1))
    assert run(store.catalogue_versions()) == [
        CatalogueVersion(two, "h2", 2.5),
        CatalogueVersion(one, "h1", 1.0),
    ]
    three = run(store.put_catalogue("h1", b'{"campaigns": []}', 3.0, keep_previous=1))
    assert [v.version for v in run(store.catalogue_versions())] == [three, two]


def test_shared_rate_buckets_only_where_nodes_share_them(store, run, backend):
    # 3 requests a second, burst 3: interval 1/3 s, tolerance 2/3 s.
    interval, tolerance = 1 / 3, 2 / 3
    answers = [run(store.take_rate("ugc:fam", 100.0, interval, tolerance)) for _ in range(4)]
    if backend == "sqlite":  # one machine: the edge keeps buckets in memory
        assert answers == [None] * 4
        assert run(store.prune_rate_buckets(1e12)) == 0
        return
    assert [a[0] for a in answers] == [True, True, True, False]
    assert answers[2][1] == pytest.approx(101.0)  # TAT a whole window ahead
    assert answers[3][1] == pytest.approx(101.0)  # refused: the stored TAT, for Retry-After
    assert run(store.take_rate("ugc:fam", 100.5, interval, tolerance))[0] is True
    assert run(store.take_rate("ugc:other", 100.0, interval, tolerance))[0] is True
    assert run(store.prune_rate_buckets(101.0)) == 1  # "other" is full again; "fam" is not
    assert run(store.prune_rate_buckets(1e12)) == 1
