"""The delivery edge over real HTTP: a real ``edge serve`` (uvicorn) behind a trusted proxy.

The process trusts 127.0.0.1 as its proxy and does not let private addresses through, so
the ``X-Forwarded-For`` this test sends (as a proxy would) is what the geofence judges.
"""

import http.client
import secrets
import time
from urllib.parse import urlsplit

import orjson
import pytest

from edge.beacons import ai_beacon_urls, issue_impression_token
from edge.cli import main
from edge.qa import EdgeProcess
from edge.signing import Signer
from matcher.catalogue import load_catalogue
from tests.conftest import AI_SCOPE, other_tail

US, GB = "216.160.83.56", "81.2.69.160"
ORIGIN = "https://news.example"


def call(edge, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=10)
    try:
        conn.request(method, path, body, headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    db = tmp_path_factory.mktemp("http") / "edge.db"
    assert main(["publishers", "add", "pub-1", "--origin", ORIGIN, "--db", str(db)]) == 0
    key = secrets.token_urlsafe(32)
    settings = {"EDGE_SIGNING_KEY": key, "EDGE_TRUSTED_PROXIES": "127.0.0.1",
                "EDGE_ALLOW_PRIVATE_IPS": "0", "EDGE_LOG_LEVEL": "warning"}  # fmt: skip
    with EdgeProcess(db=db, settings=settings) as proc:
        proc.signer = Signer(key.encode())
        yield proc


def impression(edge, surface="url", iid=None):
    tok, _ = issue_impression_token(
        edge.signer,
        surface=surface,
        env="production",
        ad_id="ad-1",
        campaign_id="cmp-1",
        now=time.time(),
        publisher_id="pub-1",
    )
    body = {"impression_token": tok, "impression_id": iid or secrets.token_hex(8), "v": "1"}
    return orjson.dumps(body)


@pytest.mark.slow
def test_preflight_for_registered_and_unknown_origins(edge):
    asks = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    status, h, _ = call(edge, "OPTIONS", "/dea/url/keywords", headers={"Origin": ORIGIN, **asks})
    assert status == 204
    assert h["access-control-allow-origin"] == ORIGIN and h["access-control-max-age"] == "7200"
    assert "Origin" in h["vary"] and "access-control-allow-credentials" not in h
    other = {"Origin": "https://evil.example", **asks}
    status, h, _ = call(edge, "OPTIONS", "/dea/url/impression", headers=other)
    assert status == 403 and "access-control-allow-origin" not in h
    # The match routes let an unknown origin through to read the route's own refusal.
    status, h, _ = call(edge, "OPTIONS", "/dea/url/keywords", headers=other)
    assert status == 204 and h["access-control-max-age"] == "600"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("xff", "status"),
    [(US, 200), (GB, 403), (f"{GB}, {US}", 200), (f"{US}, {GB}", 403), ("junk", 403), (None, 403)],
)
def test_geofence_behind_the_trusted_proxy(edge, xff, status):
    headers = {"Content-Type": "application/json"}
    if xff is not None:
        headers["X-Forwarded-For"] = xff
    got, _, body = call(edge, "POST", "/dea/url/impression", impression(edge), headers)
    assert got == status, body
    if status == 403:
        assert orjson.loads(body)["error"]["code"] == "geo_restricted"


@pytest.mark.slow
def test_impression_replay_and_forgery_over_http(edge):
    headers = {"Content-Type": "text/plain;charset=UTF-8", "X-Forwarded-For": US}
    body = impression(edge, iid="http-imp-0001")
    answers = [orjson.loads(call(edge, "POST", "/dea/url/impression", body, headers)[2])
               for _ in range(3)]  # fmt: skip
    assert [a["counted"] for a in answers] == [True, False, False]
    forged = orjson.loads(body)
    forged["impression_token"] = other_tail(forged["impression_token"], 3)
    forged["impression_id"] = "http-imp-0002"
    status, _, err = call(edge, "POST", "/dea/url/impression", orjson.dumps(forged), headers)
    assert status == 400 and orjson.loads(err)["error"]["code"] == "invalid_token"


@pytest.mark.slow
def test_a_query_parameter_on_a_beacon_post_is_refused_over_http(edge):
    # The served lane answers this beacon in front of the app: it refuses the query too.
    headers = {"Content-Type": "application/json", "X-Forwarded-For": US}
    body = impression(edge, iid="http-imp-0003")
    status, _, err = call(edge, "POST", "/dea/url/impression?x=1", body, headers)
    assert status == 400 and orjson.loads(err)["error"]["field"] == "x"
    status, _, ok = call(edge, "POST", "/dea/url/impression", body, headers)
    assert status == 200 and orjson.loads(ok)["counted"] is True  # the refusal counted nothing


@pytest.mark.slow
def test_ai_beacons_over_http(edge):
    catalogue = load_catalogue()
    number = catalogue.ad_number(next(iter(catalogue.ad_sets()[0].ads)).id)
    render, _ = ai_beacon_urls(edge.signer, edge.url, number, "m-http", "c-http", scope=AI_SCOPE)
    url = urlsplit(render)
    path = f"{url.path}?{url.query}"
    assert [call(edge, "GET", path, headers={"X-Forwarded-For": US})[0] for _ in range(2)] == [
        204, 204,
    ]  # fmt: skip
    tampered = path.replace("m-http", "m-evil")
    assert call(edge, "GET", tampered, headers={"X-Forwarded-For": US})[0] == 400
    assert call(edge, "GET", path, headers={"X-Forwarded-For": GB})[0] == 403


@pytest.mark.slow
def test_a_bad_geo_database_stops_the_start_naming_the_setting(tmp_path):
    bad = tmp_path / "bad.mmdb"
    bad.write_bytes(b"not a database")
    proc = EdgeProcess(db=tmp_path / "e.db", settings={"EDGE_GEOIP_DB": str(bad)}, start_timeout=60)
    try:
        with pytest.raises(RuntimeError) as failed:
            proc.start()
    finally:
        proc.__exit__(None, None, None)  # closes its log file (start() failed, so no `with`)
    assert "EDGE_GEOIP_DB" in str(failed.value)


@pytest.mark.slow
def test_publishers_added_by_the_cli_reach_the_running_edge(edge):
    asks = {"Origin": "https://late.example", "Access-Control-Request-Method": "POST"}
    assert call(edge, "OPTIONS", "/dea/url/hover", headers=asks)[0] == 403
    args = ["publishers", "add", "pub-late", "--origin", "https://late.example"]
    assert main([*args, "--db", str(edge.db)]) == 0  # another process than the edge
    deadline = time.monotonic() + 10  # the edge re-reads publishers every 3 s
    while time.monotonic() < deadline:
        if call(edge, "OPTIONS", "/dea/url/hover", headers=asks)[0] == 204:
            break
        time.sleep(0.1)
    assert call(edge, "OPTIONS", "/dea/url/hover", headers=asks)[0] == 204
