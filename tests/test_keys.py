import asyncio

import pytest

from edge import keys
from edge.errors import Conflict, Unauthorized
from edge.keys import SECONDARY_TTL_SECONDS, Keyring
from edge.store import SQLiteStore


@pytest.fixture
def keyring(tmp_path, clock):
    store = SQLiteStore(tmp_path / "edge.db")
    store.open_blocking()
    yield Keyring(store, clock, cache_seconds=0)
    store.close_blocking()


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize(
    ("env", "product", "prefix"),
    [
        ("production", "ugc", "prod-ugc-"),
        ("production", "ad-manager", "prod-ad-manager-"),
        ("sandbox", "ai", "sandbox-ai-"),
    ],
)
def test_generated_keys_parse_back(env, product, prefix):
    key = keys.generate(env, product)
    assert key.startswith(prefix)
    assert keys.parse(key) == keys.ParsedKey(env, product)


def test_checksum_catches_a_typo():
    key = keys.generate("production", "ugc")
    i = len("prod-ugc-") + 3
    typo = key[:i] + ("A" if key[i] != "A" else "B") + key[i + 1 :]
    assert keys.parse(typo) is None


@pytest.mark.parametrize(
    "junk",
    ["", "prod", "prod-ugc-short-abcdef", "test-ugc-" + "a" * 32 + "-abcdef", "ключ", "x" * 500],
)
def test_junk_does_not_parse(junk):
    assert keys.parse(junk) is None


def test_only_a_hash_is_stored(keyring, tmp_path):
    key, record = run(keyring.issue("production", "ugc", "partner"))
    raw = (tmp_path / "edge.db").read_bytes() + (tmp_path / "edge.db-wal").read_bytes()
    assert key.encode() not in raw
    assert record.key_hash == keys.key_hash(key)


def test_verify_accepts_the_right_scope(keyring):
    key, record = run(keyring.issue("production", "ugc"))
    assert run(keyring.verify(key, env="production", product="ugc")) == record
    # HTTP's optional whitespace around a header value is not part of the key.
    for padded in (f"{key} ", f"{key} \t", f"\t {key}"):
        assert run(keyring.verify(padded, env="production", product="ugc")) == record


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "required"),
        ("malformed", "malformed"),
        ("unknown", "not known"),
        ("revoked", "revoked"),
        ("wrong_product", "ai product"),
        ("wrong_env", "sandbox key"),
    ],
)
def test_verify_rejects(keyring, case, message):
    key, _ = run(keyring.issue("production", "ugc"))
    presented = {
        "missing": None,
        "malformed": "prod-ugc-nope",
        "unknown": keys.generate("production", "ugc"),
        "revoked": key,
        "wrong_product": run(keyring.issue("production", "ai"))[0],
        "wrong_env": run(keyring.issue("sandbox", "ugc"))[0],
    }[case]
    if case == "revoked":
        assert run(keyring.revoke(key)) is not None
    with pytest.raises(Unauthorized, match=message) as err:
        run(keyring.verify(presented, env="production", product="ugc"))
    assert err.value.status == 401


def test_rotation_keeps_the_old_key_exactly_24_hours(keyring, clock):
    old, _ = run(keyring.issue("production", "ugc"))
    rot = run(keyring.rotate(old))
    assert rot.secondary_key == old
    assert rot.secondary_expires_at == clock() + SECONDARY_TTL_SECONDS
    assert run(keyring.verify(rot.api_key, env="production", product="ugc"))

    clock.advance(SECONDARY_TTL_SECONDS - 0.001)
    assert run(keyring.verify(old, env="production", product="ugc")).key_id
    clock.advance(0.001)  # exactly 24 h: expired
    with pytest.raises(Unauthorized, match="expired"):
        run(keyring.verify(old, env="production", product="ugc"))
    assert run(keyring.verify(rot.api_key, env="production", product="ugc"))


def test_a_secondary_cannot_be_rotated_again(keyring):
    old, _ = run(keyring.issue("production", "ugc"))
    run(keyring.rotate(old))
    with pytest.raises(Conflict):
        run(keyring.rotate(old))


def test_rotating_an_unknown_key_is_unauthorized(keyring):
    with pytest.raises(Unauthorized):
        run(keyring.rotate(keys.generate("production", "ugc")))


def test_revoke_by_key_id(keyring):
    key, record = run(keyring.issue("sandbox", "ad-manager"))
    assert run(keyring.revoke(record.key_id)).revoked_at is not None
    assert run(keyring.revoke(record.key_id)) is None  # already revoked
    with pytest.raises(Unauthorized):
        run(keyring.verify(key, env="sandbox", product="ad-manager"))


def test_cache_is_invalidated_by_local_revocation(tmp_path, clock):
    store = SQLiteStore(tmp_path / "c.db")
    store.open_blocking()
    try:
        ring = Keyring(store, clock, cache_seconds=3600)
        key, _ = run(ring.issue("production", "ai"))
        run(ring.verify(key, env="production", product="ai"))
        run(ring.revoke(key))
        with pytest.raises(Unauthorized):
            run(ring.verify(key, env="production", product="ai"))
    finally:
        store.close_blocking()


@pytest.fixture
def cached_ring(tmp_path, clock):
    """A keyring with a 5 s cache, and its store (to write as another process would)."""
    store = SQLiteStore(tmp_path / "f.db")
    store.open_blocking()
    yield Keyring(store, clock, cache_seconds=5), store
    store.close_blocking()


def test_a_family_is_live_while_it_has_a_valid_key(cached_ring, clock):
    ring, _store = cached_ring
    key, record = run(ring.issue("production", "ai"))
    assert run(ring.family_live(record.family)) is True
    rot = run(ring.rotate(key))
    assert run(ring.family_live(record.family)) is True
    # Revoking the old key (a secondary now) leaves the new one: still live.
    run(ring.revoke(record.key_id))
    assert run(ring.family_live(record.family)) is True
    run(ring.revoke(rot.record.key_id))  # the family's last valid key: at once, here
    assert run(ring.family_live(record.family)) is False
    assert run(ring.family_live("key_000000000000")) is False  # no such family


def test_a_family_whose_active_key_is_revoked_lives_until_its_secondary_expires(cached_ring, clock):
    ring, _store = cached_ring
    key, record = run(ring.issue("production", "ugc"))
    rot = run(ring.rotate(key))
    run(ring.revoke(rot.record.key_id))  # the new key; the old one still works a day
    assert run(ring.family_live(record.family)) is True
    clock.advance(SECONDARY_TTL_SECONDS)
    assert run(ring.family_live(record.family)) is False


def test_a_revocation_by_another_process_is_seen_within_the_cache_time(cached_ring, clock):
    ring, store = cached_ring
    _key, record = run(ring.issue("production", "ai"))
    assert run(ring.family_live(record.family)) is True
    assert run(store.revoke_key(record.key_id, clock()))  # the CLI, elsewhere
    clock.advance(4.9)
    assert run(ring.family_live(record.family)) is True  # the cached view, as for keys
    clock.advance(0.1)
    assert run(ring.family_live(record.family)) is False


def test_an_announced_key_change_drops_the_cached_families(cached_ring, clock):
    ring, store = cached_ring
    _key, record = run(ring.issue("production", "ai"))
    assert run(ring.family_live(record.family)) is True
    assert run(store.revoke_key(record.key_id, clock()))
    ring.forget()  # another node announced it
    assert run(ring.family_live(record.family)) is False
