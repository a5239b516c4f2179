"""The /dea match routes on the real matcher (the session's shared one, as /v1 uses)."""

import pytest
from starlette.testclient import TestClient

from edge.beacons import read_impression_token
from tests.delivery.helpers import ORIGIN, PUB, register

PAGE = "https://news.example/story"
NEWS = ("Breaking news: the death toll from the earthquake rose to 300 overnight as rescue "
        "teams searched collapsed buildings; officials declared a state of emergency.")  # fmt: skip
DOGS = "My dog is a picky eater and will not touch his kibble. What food do picky dogs finish?"
RUNNING = "Training for my first trail marathon; my shoes slip on wet rocks on the descents."
DINNER = "Too tired to cook tonight. Which local restaurants deliver dinner fast near me?"


@pytest.fixture
def client(make_client):
    c = make_client()
    register(c)
    c.headers["Origin"] = ORIGIN  # browsers send it on every POST; the match routes need it
    return c


def keywords(client, text, slots=("side",)):
    body = {"publisher_id": PUB, "v": "1", "page_url": PAGE, "text": text, "slots": list(slots)}
    r = client.post("/dea/url/keywords", json=body, headers={"Origin": ORIGIN})
    assert r.status_code == 200, r.text
    return r.json()


def test_relevant_page_gets_a_relevant_ad_with_a_usable_token(client):
    body = keywords(client, DOGS, slots=("side", "foot"))
    ad = body["placements"][0]["ad"]
    assert body["safe"] is True and ad["ad_id"].startswith("ad-dog")
    ids = [p["ad"]["ad_id"] for p in body["placements"] if p["ad"]]
    assert len(ids) == len(set(ids))  # one distinct ad per slot
    r = client.post(
        "/dea/url/impression",
        json={"impression_token": ad["impression_token"], "impression_id": "iid-000001", "v": "1"},
    )
    assert r.json() == {"acknowledged": True, "counted": True}


def test_news_page_gets_no_ads(client):
    body = keywords(client, NEWS, slots=("side", "foot"))
    assert body["safe"] is False
    assert [p["ad"] for p in body["placements"]] == [None, None]
    assert {p["reason"] for p in body["placements"]} == {"unsafe"}


def test_ugc_slot_is_matched_to_its_post(client):
    body = {"publisher_id": PUB, "v": "1", "page_url": PAGE, "placements": [
        {"slot_id": "p-1-ad", "post_id": "p-1", "text": RUNNING},
        {"slot_id": "p-2-ad", "post_id": "p-2", "text": NEWS},
    ]}  # fmt: skip
    out = client.post("/dea/url/placements", json=body).json()["placements"]
    assert out[0]["ad"]["ad_id"] in {"ad-trail-shoes", "ad-road-shoes", "ad-gps-watch"}
    ctx = client.app.state.ctx
    claims = read_impression_token(
        ctx.signer, out[0]["ad"]["impression_token"], surface="ugc", env="production",
        now=ctx.clock(),
    )  # fmt: skip
    assert claims.post_id == "p-1" and claims.slot_id == "p-1-ad"
    assert out[1]["ad"] is None and out[1]["reason"] == "unsafe"


def test_the_browser_address_geo_targets(client):
    # The Bay Area delivery ad targets DMA 807; the tag's caller is the end user, so the
    # client address places them (8.8.8.8: Mountain View; 216.160.83.56: Milton, WA).
    bay = TestClient(client.app, client=("8.8.8.8", 40000))
    near = [
        p["ad"]["ad_id"] for p in keywords(bay, DINNER, ("a", "b", "c"))["placements"] if p["ad"]
    ]
    far = [
        p["ad"]["ad_id"] for p in keywords(client, DINNER, ("a", "b", "c"))["placements"] if p["ad"]
    ]
    assert "ad-bay-delivery" in near
    assert "ad-bay-delivery" not in far
