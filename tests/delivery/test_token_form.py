"""A rolling upgrade: a node set to issue the earlier (JSON) token form, which nodes of the
earlier release read, while it still reads both forms itself."""

import base64
import hashlib
import hmac

import orjson
import pytest

from edge.beacons import LEGACY_IMPRESSION_PURPOSE, issue_impression_token, read_impression_token
from edge.context import Context
from edge.partner.render import ugc_ad
from edge.settings import Settings, SettingsError
from edge.signing import Signer
from matcher.catalogue import load_catalogue
from matcher.types import ScoredAd
from tests.delivery.helpers import ORIGIN, PUB, register
from tests.routes.conftest import CATALOGUE

KEY = b"k" * 32
CLAIMS = {"surface": "url", "env": "production", "ad_id": "ad-1", "campaign_id": "cmp-1",
          "cpm_usd": 2.5, "publisher_id": PUB, "slot_id": "side", "client": "bound"}  # fmt: skip
PAGE = "https://news.example/story"
DOGS = "My dog is a picky eater and will not touch his kibble. What food do picky dogs finish?"


def earlier_release_read(key: bytes, token: str) -> dict | None:
    """The payload of an impression token as a node of the earlier release reads it (JSON
    form only), written out from that form's rules rather than through this release's
    code: base64 text, a dot, the 128-bit HMAC-SHA256 of the purpose and the text, each
    length-prefixed; None for anything else."""
    if token.count(".") != 1:
        return None
    body, signature = token.split(".")
    signed = b"".join(
        len(part).to_bytes(8, "big") + part
        for part in (LEGACY_IMPRESSION_PURPOSE.encode(), body.encode())
    )
    expected = base64.urlsafe_b64encode(hmac.new(key, signed, hashlib.sha256).digest()[:16])
    if not hmac.compare_digest(expected.rstrip(b"="), signature.encode()):
        return None
    payload = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    assert isinstance(payload, dict)
    return payload


def test_the_setting_is_binary_unless_set_to_json():
    assert Settings().token_form == "binary"
    assert Settings.from_sources({}, {"EDGE_TOKEN_FORM": "json"}).token_form == "json"
    assert Settings.from_sources({"token_form": "json"}, {}).token_form == "json"
    with pytest.raises(SettingsError, match="EDGE_TOKEN_FORM"):
        Settings.from_sources({}, {"EDGE_TOKEN_FORM": "v2"})


def test_a_json_form_token_is_read_by_the_earlier_release_and_by_this_one():
    signer = Signer(KEY)
    token, claims = issue_impression_token(signer, now=1000.0, form="json", **CLAIMS)
    payload = earlier_release_read(KEY, token)
    assert payload == {
        "t": claims.token_id, "s": "url", "e": "production", "a": "ad-1", "c": "cmp-1",
        "i": 1000, "m": 2.5, "p": PUB, "o": None, "l": "side", "b": "bound",
    }  # fmt: skip
    assert read_impression_token(signer, token, surface="url", env="production", now=1001) == (
        claims
    )
    # The binary form is what the earlier release refuses, and the default.
    binary, _ = issue_impression_token(signer, now=1000.0, **CLAIMS)
    assert earlier_release_read(KEY, binary) is None
    assert earlier_release_read(b"x" * 32, token) is None  # another key's reader refuses it


def test_a_node_set_to_json_hands_out_json_tokens_that_count_once(make_client):
    client = make_client(token_form="json")
    register(client)
    client.headers["Origin"] = ORIGIN
    body = {"publisher_id": PUB, "v": "1", "page_url": PAGE, "text": DOGS, "slots": ["side"]}
    r = client.post("/dea/url/keywords", json=body)
    assert r.status_code == 200, r.text
    token = r.json()["placements"][0]["ad"]["impression_token"]
    ctx = client.app.state.ctx
    payload = earlier_release_read(ctx.signer._key, token)
    assert payload is not None and payload["s"] == "url" and payload["p"] == PUB
    beacon = {"impression_token": token, "impression_id": "iid-000001", "v": "1"}
    assert client.post("/dea/url/impression", json=beacon).json()["counted"] is True
    again = {**beacon, "impression_id": "iid-000002"}
    assert client.post("/dea/url/impression", json=again).json()["counted"] is False
    assert client.portal.call(ctx.store.impression_count, "url") == 1


def test_the_partner_pixel_and_click_url_follow_the_setting(tmp_path):
    catalogue = load_catalogue(CATALOGUE)
    placement = catalogue.placement("ad-dog-food")
    for form, readable in (("json", True), ("binary", False)):
        settings = Settings(db=tmp_path / "edge.db", cache_dir=tmp_path / "c", token_form=form)
        ctx = Context.build(settings)
        ctx.signer = Signer(KEY)
        ad = ugc_ad(ctx, ScoredAd(placement, 0.9, 0.9), "p-1")
        token = ad["pixel_trackers"][-1]["url"].split("?t=", 1)[1]
        assert (earlier_release_read(KEY, token) is not None) is readable, form
        assert ad["click_url"].split("?t=", 1)[1] == token
