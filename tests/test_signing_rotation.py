"""Rotating the signing key: what the previous key signed is still taken until it is
dropped, nothing else is, and the names that must not change do not."""

import asyncio
import secrets
from urllib.parse import parse_qsl, urlsplit

import pytest

from edge.beacons import (
    InvalidToken,
    ai_beacon_urls,
    issue_impression_token,
    read_impression_token,
    verify_ai_beacon,
)
from edge.clients import ClientCache
from edge.ivt import Client, TrafficClassifier, client_key
from edge.reports import session
from edge.settings import Settings, SettingsError
from edge.signing import Signer
from edge.store import KeyRecord, open_store
from edge.threads import partner_scope
from matcher.types import PricingModel
from tests.conftest import FakeClock

OLD_KEY, NEW_KEY, FORGER_KEY = (secrets.token_urlsafe(32).encode() for _ in range(3))
OLD = Signer(OLD_KEY)  # the edge before the rotation
ROTATING = Signer(NEW_KEY, previous=OLD_KEY)  # the new key, the old one as previous
ROTATED = Signer(NEW_KEY)  # the previous key dropped
FORGER = Signer(FORGER_KEY)  # a key the edge never had
NOW = 1_000_000.0
CHROME = "Mozilla/5.0 (X11; Linux x86_64) Chrome/126.0.0.0 Safari/537.36"


def _token(signer: Signer, form: str, client: str | None = None) -> str:
    token, _ = issue_impression_token(
        signer, surface="url", env="production", ad_id="ad-1", campaign_id="cmp-1", now=NOW,
        client=client, form=form,  # type: ignore[arg-type]
    )  # fmt: skip
    return token


def _read(signer: Signer, token: str):
    return read_impression_token(signer, token, surface="url", env="production", now=NOW + 60)


def _view_query(signer: Signer) -> dict[str, str]:
    _, view = ai_beacon_urls(
        signer,
        "https://edge.test",
        7,
        "m-1",
        "c-1",
        scope="partner-0001",
        pricing=PricingModel("cpm", 2.5),
        key_family="key_0123456789ab",
        issued_at=NOW,
    )
    return dict(parse_qsl(urlsplit(view).query, keep_blank_values=True))


@pytest.mark.parametrize("form", ["binary", "json"])
def test_an_impression_token_of_the_previous_key_is_taken_until_it_is_dropped(form):
    token = _token(OLD, form)
    assert _read(ROTATING, token).ad_id == "ad-1"
    with pytest.raises(InvalidToken):
        _read(ROTATED, token)
    with pytest.raises(InvalidToken):
        _read(ROTATING, _token(FORGER, form))
    # What the rotating edge issues is the new key's alone.
    new = _token(ROTATING, form)
    assert _read(ROTATED, new).ad_id == "ad-1"
    with pytest.raises(InvalidToken):
        _read(OLD, new)


def test_an_ai_url_of_the_previous_key_is_taken_until_it_is_dropped():
    old = _view_query(OLD)
    assert verify_ai_beacon(ROTATING, "view", old, now=NOW).ad_id == 7
    with pytest.raises(InvalidToken):
        verify_ai_beacon(ROTATED, "view", old, now=NOW)
    with pytest.raises(InvalidToken):
        verify_ai_beacon(ROTATING, "view", _view_query(FORGER), now=NOW)
    with pytest.raises(InvalidToken):  # an old URL edited keeps no signature of either key
        verify_ai_beacon(ROTATING, "view", {**old, "ad_id": "8"}, now=NOW)
    assert _view_query(ROTATING)["sig"] == _view_query(ROTATED)["sig"]


def test_a_reports_session_of_the_previous_key_is_taken_until_it_is_dropped():
    cookie = session.seal(OLD, "key_0123456789ab", NOW)
    found = session.unseal(ROTATING, cookie, NOW + 60)
    assert found is not None and found.key_id == "key_0123456789ab"
    assert session.unseal(ROTATED, cookie, NOW + 60) is None
    assert session.unseal(ROTATING, session.seal(FORGER, "key_0123456789ab", NOW), NOW) is None
    # Expiry is still the session's own.
    assert session.unseal(ROTATING, cookie, NOW + session.SESSION_SECONDS) is None


def _judge(signer: Signer, bound_to: str, ip: str = "203.0.113.7", agent: str = CHROME):
    """The verdict on a beacon from ``ip`` with ``agent`` of a token bound to ``bound_to``."""
    clients = ClientCache((), signer=lambda: signer)
    entry = clients.lookup(ip, ())
    binding = clients.binding_for(entry, agent, bound_to)
    traffic = TrafficClassifier(Settings(), FakeClock())
    client = Client(ip, agent)
    return traffic.classify_impression(
        client, key=client_key(signer, client), bound_to=bound_to, binding=binding
    ).reason


def test_a_token_bound_before_the_rotation_is_still_its_clients():
    old_clients = ClientCache((), signer=lambda: OLD)
    bound_to = old_clients.binding(old_clients.lookup("203.0.113.7", ()), CHROME)
    token = _token(OLD, "binary", client=bound_to)
    assert _read(ROTATING, token).client == bound_to
    assert _judge(ROTATING, bound_to) is None  # the same client: valid
    assert _judge(ROTATING, bound_to, ip="203.0.113.8") == "client_mismatch"
    assert _judge(ROTATING, bound_to, agent=CHROME + " Edg/126") == "client_mismatch"
    assert _judge(ROTATED, bound_to) == "client_mismatch"  # the previous key dropped
    forged = ClientCache((), signer=lambda: FORGER)
    other = forged.binding(forged.lookup("203.0.113.7", ()), CHROME)
    assert _judge(ROTATING, other) == "client_mismatch"


def test_a_partner_scope_outlives_every_rotation(tmp_path):
    key = KeyRecord("key_0123456789ab", "lookup", "hash", "production", "ai", "p", 0.0)
    k1, k2, k3 = (secrets.token_urlsafe(32) for _ in range(3))

    async def scopes() -> list[str]:
        store = open_store(Settings(db=tmp_path / "edge.db"))
        await store.open()
        try:
            found = []
            for current, previous in ((k1, None), (k2, k1), (k2, None), (k3, k2), (k3, None)):
                env = {"EDGE_SIGNING_KEY": current}
                if previous:
                    env["EDGE_SIGNING_KEY_PREVIOUS"] = previous
                signer = await Signer.from_settings(Settings.from_sources({}, env), store)
                found.append(partner_scope(signer, "ai", key))
            return found
        finally:
            await store.close()

    found = asyncio.run(scopes())
    assert found == [partner_scope(Signer(k1.encode()), "ai", key)] * 5
    assert found[0] != partner_scope(Signer(k2.encode()), "ai", key)


def test_a_previous_key_follows_the_signing_keys_rules():
    key = secrets.token_urlsafe(32)
    env = {"EDGE_SIGNING_KEY": key, "EDGE_SIGNING_KEY_PREVIOUS": "CHANGE-ME" + key}
    with pytest.raises(SettingsError, match=r"^EDGE_SIGNING_KEY_PREVIOUS: this is the example"):
        Settings.from_sources({}, env)
    with pytest.raises(SettingsError, match=r"^EDGE_SIGNING_KEY_PREVIOUS: expected at least 32"):
        Settings.from_sources({}, {**env, "EDGE_SIGNING_KEY_PREVIOUS": "short"})
    with pytest.raises(SettingsError, match="the same as EDGE_SIGNING_KEY"):
        Settings.from_sources({}, {**env, "EDGE_SIGNING_KEY_PREVIOUS": key})
    with pytest.raises(SettingsError, match="set only beside EDGE_SIGNING_KEY"):
        Settings.from_sources({}, {"EDGE_SIGNING_KEY_PREVIOUS": key})
    previous = secrets.token_urlsafe(32)
    settings = Settings.from_sources({}, {**env, "EDGE_SIGNING_KEY_PREVIOUS": previous})
    assert settings.signing_key_previous == previous and previous not in repr(settings)
