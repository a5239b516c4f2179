"""GET /reports: refused without an Ad Manager key, signed in through a strict cookie, and
showing exactly the store's day buckets under a strict CSP."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from edge import ledger
from edge.routes.reports import CSP
from edge.settings import RateLimit
from edge.store import Impression
from tests.conftest import assert_error_shape, issue_key

TODAY = "2026-09-21"  # the test clock's day (UTC)
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class Rows(HTMLParser):
    """The page's numbers: {(campaign, day): {counter or rate: text}}."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[tuple[str, str], dict[str, str]] = {}
        self._row: dict[str, str] | None = None
        self._cell: str | None = None
        self.svgs = 0
        self.scripts = 0
        self.inline_styles = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.svgs += tag == "svg"
        self.scripts += tag == "script"
        self.inline_styles += tag == "style" or "style" in a
        if tag == "tr" and "data-campaign" in a:
            self._row = self.rows.setdefault((a["data-campaign"], a["data-day"]), {})
        elif tag == "td" and self._row is not None:
            self._cell = a.get("data-counter") or a.get("data-rate")

    def handle_data(self, data):
        if self._row is not None and self._cell:
            self._row[self._cell] = data

    def handle_endtag(self, tag):
        if tag == "td":
            self._cell = None
        elif tag == "tr":
            self._row = None


def parse(html: str) -> Rows:
    p = Rows()
    p.feed(html)
    return p


def _seed(client) -> None:
    ctx = client.app.state.ctx
    now = ctx.clock()
    for i, at in enumerate([now - 3600, now - 2 * 86_400, now - 2 * 86_400 + 60]):
        client.portal.call(ledger.record_impression, ctx.store, Impression(
            kind="url", dedupe_keys=(f"tok:{i}",), env="production", ad_id="ad-trail-1",
            campaign_id="cmp-trailhead", at=at, publisher_id="pub-1", cpm_usd=4.0,
        ))  # fmt: skip
    client.portal.call(
        ctx.store.add_counts,
        [
            (TODAY, "campaign", "cmp-trailhead", "matches", 4),
            ("2026-09-19", "campaign", "cmp-trailhead", "matches", 2),
            ("2026-09-19", "campaign", "cmp-trailhead", "clicks", 1),
            ("2026-09-19", "campaign", "cmp-trailhead", "billable_usd", 1.25),
            ("2026-09-10", "campaign", "cmp-<b>", "matches", 3),  # not in the catalogue
            ("2026-08-01", "campaign", "cmp-trailhead", "matches", 50),  # before the 30 days
            ("campaign", "cmp-trailhead", "billable_usd", 1.25),
        ],
    )


def _signed_in(client) -> None:
    key = issue_key(client, "ad-manager")
    r = client.post("/reports/login", data={"key": key}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/reports"


def test_without_a_key_the_page_is_the_sign_in_form_and_shows_no_number(make_client):
    client = make_client()
    _seed(client)
    r = client.get("/reports")
    assert r.status_code == 401
    assert r.headers["content-security-policy"] == CSP
    assert r.headers["cache-control"] == "no-store"
    page = parse(r.text)
    assert page.rows == {} and page.svgs == 0
    assert 'action="/reports/login"' in r.text and "cmp-trailhead" not in r.text


@pytest.mark.parametrize("product", ["ugc", "ai"])
def test_other_products_keys_are_refused(make_client, product):
    client = make_client()
    key = issue_key(client, product)
    r = client.get("/reports", headers={"X-API-Key": key})
    assert r.status_code == 401 and "this endpoint needs ad-manager" in r.text
    r = client.post("/reports/login", data={"key": key}, follow_redirects=False)
    assert r.status_code == 401 and "set-cookie" not in r.headers
    assert "this endpoint needs ad-manager" in r.text


def test_a_sandbox_key_is_refused_by_production(make_client):
    client = make_client()
    key = issue_key(client, "ad-manager", env="sandbox")
    r = client.post("/reports/login", data={"key": key}, follow_redirects=False)
    assert r.status_code == 401 and "this is a sandbox key" in r.text


def test_sign_in_sets_a_strict_session_cookie_that_holds_no_key(make_client):
    client = make_client()
    key = issue_key(client, "ad-manager")
    r = client.post("/reports/login", data={"key": key}, follow_redirects=False)
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    name, value = cookie.split(";")[0].split("=", 1)
    assert name == "edge_reports" and key not in value and len(value) > 20
    attributes = {a.strip().split("=")[0] for a in cookie.split(";")[1:]}
    assert {"HttpOnly", "SameSite", "Path", "Max-Age"} <= attributes
    assert "SameSite=Strict" in cookie and "Path=/reports" in cookie
    assert "Secure" not in attributes  # plain http here; https gets it (next test)


def test_an_https_edge_marks_the_cookie_secure(make_client):
    client = make_client(public_base_url="https://edge.example")
    key = issue_key(client, "ad-manager")
    r = client.post("/reports/login", data={"key": key}, follow_redirects=False)
    assert "; Secure" in r.headers["set-cookie"]


def test_the_page_shows_exactly_the_stores_buckets_of_the_last_30_days(make_client):
    client = make_client()
    _seed(client)
    _signed_in(client)
    r = client.get("/reports")
    assert r.status_code == 200, r.text
    assert r.headers["content-security-policy"] == CSP
    assert r.headers["content-type"].startswith("text/html")
    page = parse(r.text)
    assert page.scripts == 0 and page.inline_styles == 0
    assert page.svgs >= 3  # delivery, viewability, and a pacing chart per campaign
    ctx = client.app.state.ctx
    stored = client.portal.call(ctx.store.daily_counts, "2026-08-23", TODAY, ["campaign"])
    expected: dict[tuple[str, str], dict[str, float]] = {}
    for day, _scope, cid, counter, amount in stored:
        expected.setdefault((cid, day), {})[counter] = amount
    assert set(page.rows) == set(expected) == {
        ("cmp-trailhead", TODAY), ("cmp-trailhead", "2026-09-19"), ("cmp-<b>", "2026-09-10"),
    }  # fmt: skip
    for key, cells in page.rows.items():
        for counter in ("matches", "impressions", "viewable_impressions", "clicks"):
            assert float(cells[counter]) == expected[key].get(counter, 0), (key, counter)
        assert float(cells["billable_usd"]) == pytest.approx(expected[key].get("billable_usd", 0))
    assert page.rows[("cmp-trailhead", TODAY)]["impressions"] == "1"
    assert page.rows[("cmp-trailhead", TODAY)]["delivery"] == "25.0%"  # 1 of 4 served
    assert page.rows[("cmp-trailhead", "2026-09-19")]["viewability"] == "100.0%"
    assert page.rows[("cmp-<b>", "2026-09-10")]["delivery"] == "0.0%"  # 0 of 3 served
    assert page.rows[("cmp-<b>", "2026-09-10")]["viewability"] == "-"  # no impression: no rate
    assert "cmp-<b>" not in r.text and "cmp-&lt;b&gt;" in r.text  # escaped everywhere


def test_the_pacing_chart_draws_spend_to_date_against_the_even_line(make_client):
    client = make_client()
    _seed(client)
    _signed_in(client)
    text = client.get("/reports").text
    # cmp-trailhead: 5,000 USD from 2026-01-01 with no end: no even line, said in words.
    figure = text.split('<figure data-campaign="cmp-trailhead">')[1].split("</figure>")[0]
    assert "No even line" in figure
    # Its spend to date ends at the total billed: 1.25 by clicks + 3 impressions at 4 CPM,
    # to the micro-dollar (not rounded to the cent).
    assert f"spent, {TODAY}: $1.262</title>" in figure
    assert "spent, 2026-09-18: $0.00</title>" in figure


def test_an_api_key_header_works_for_scripts(make_client):
    client = make_client()
    _seed(client)
    key = issue_key(client, "ad-manager")
    r = client.get("/reports", headers={"X-API-Key": key})
    assert r.status_code == 200 and ("cmp-trailhead", TODAY) in parse(r.text).rows
    assert "set-cookie" not in r.headers


def test_a_scripts_keyed_requests_spend_the_keys_ad_manager_quota(make_client):
    # As on every keyed route: the RateLimit headers, and 429 past the quota, which the
    # key's other Ad Manager calls share. A signed-in browser's page views spend nothing.
    client = make_client(rate_limit_ad_manager=RateLimit(2, 10.0))
    key = issue_key(client, "ad-manager")
    first = client.get("/reports", headers={"X-API-Key": key})
    assert first.status_code == 200
    assert first.headers["RateLimit-Policy"] == '"ad-manager";q=2;w=10'
    assert first.headers["RateLimit"].startswith('"ad-manager";r=1')
    assert client.get("/v1/ad-manager/campaigns", headers={"X-API-Key": key}).status_code == 200
    r = client.get("/reports", headers={"X-API-Key": key})
    assert_error_shape(r, 429)
    assert int(r.headers["Retry-After"]) > 0 and "RateLimit" in r.headers
    signed_in = make_client(
        rate_limit_ad_manager=RateLimit(1, 10.0), db=client.app.state.ctx.settings.db
    )
    assert signed_in.post("/reports/login", data={"key": key}).status_code == 200
    for _ in range(3):
        assert signed_in.get("/reports").status_code == 200


def test_revoking_the_key_ends_its_sessions(make_client):
    client = make_client()
    key = issue_key(client, "ad-manager")
    client.post("/reports/login", data={"key": key}, follow_redirects=False)
    assert client.get("/reports").status_code == 200
    ctx = client.app.state.ctx
    client.portal.call(ctx.keyring.revoke, key)
    assert client.get("/reports").status_code == 401


def test_a_session_expires_and_a_forged_cookie_is_worthless(make_client, clock):
    client = make_client()
    _signed_in(client)
    assert client.get("/reports").status_code == 200
    clock.advance(12 * 3600 + 1)
    assert client.get("/reports").status_code == 401
    client.cookies.set("edge_reports", "eyJrIjoia2V5In0.forged", path="/reports")
    assert client.get("/reports").status_code == 401


def test_sign_out_clears_the_cookie(make_client):
    client = make_client()
    _signed_in(client)
    r = client.post("/reports/logout", follow_redirects=False)
    assert r.status_code == 303 and "Max-Age=0" in r.headers["set-cookie"]
    assert client.get("/reports").status_code == 401


def test_sign_out_ends_the_session_so_a_copy_of_the_cookie_is_refused(make_client, clock):
    client = make_client()
    ctx = client.app.state.ctx
    key = issue_key(client, "ad-manager")

    def signed_in() -> dict[str, str]:  # a browser's cookie header after signing in
        r = client.post("/reports/login", data={"key": key}, follow_redirects=False)
        client.cookies.clear()
        return {"Cookie": r.headers["set-cookie"].split(";")[0]}

    first, second = signed_in(), signed_in()  # two browsers, one key
    assert client.get("/reports", headers=first).status_code == 200
    client.post("/reports/logout", headers=first, follow_redirects=False)
    client.cookies.clear()
    assert client.get("/reports", headers=first).status_code == 401  # a copy is worthless
    assert client.get("/reports", headers=second).status_code == 200  # its own session
    # A cookie sealed before sessions had ids cannot be ended: it is refused.
    old = ctx.signer.seal("reports-session", {"k": "key", "exp": int(clock() + 3600)})
    assert client.get("/reports", headers={"Cookie": f"edge_reports={old}"}).status_code == 401
    # Ended sessions are forgotten once they would have expired.
    clock.advance(12 * 3600 + 1)
    client.post("/reports/logout", headers=signed_in(), follow_redirects=False)

    def ended(conn):
        return conn.execute("SELECT count(*) FROM ended_sessions").fetchone()[0]

    assert client.portal.call(ctx.store.read, ended) == 1


def test_a_sign_in_posted_from_another_origin_is_refused(make_client):
    client = make_client()
    key = issue_key(client, "ad-manager")
    r = client.post(
        "/reports/login",
        data={"key": key},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert_error_shape(r, 403)
    assert "set-cookie" not in r.headers
    ok = client.post(
        "/reports/login",
        data={"key": key},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert ok.status_code == 303


def test_behind_an_https_base_url_a_plain_http_origin_is_another_site(make_client):
    # A page injected into plain http on the edge's own host must not sign a visitor in.
    client = make_client(public_base_url="https://testserver")
    key = issue_key(client, "ad-manager")

    def post(origin):
        return client.post(
            "/reports/login", data={"key": key}, headers={"Origin": origin},
            follow_redirects=False,
        )  # fmt: skip

    assert_error_shape(post("http://testserver"), 403)
    assert post("https://testserver").status_code == 303


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"json": {"key": "x"}}, 415),
        ({"content": b"&".join(b"f%d=1" % i for i in range(9)), "headers": FORM}, 400),
        (
            {
                "content": b"key=" + b"a" * 5000,
                "headers": {"Content-Type": "application/x-www-form-urlencoded"},
            },
            413,
        ),
    ],
)
def test_bad_sign_in_bodies_are_refused_in_the_error_shape(make_client, kwargs, status):
    client = make_client()
    assert_error_shape(client.post("/reports/login", follow_redirects=False, **kwargs), status)


@pytest.mark.parametrize(
    "body", [b"", b"key=", b"key=%ff%fe", b"nokey=1", b"key=prod-ad-manager-zzz", b"&&==&"]
)
def test_odd_sign_in_forms_get_the_form_again(make_client, body):
    client = make_client()
    r = client.post(
        "/reports/login",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert r.status_code == 401 and 'action="/reports/login"' in r.text


def test_the_stylesheet_is_served_from_the_edge(make_client):
    r = make_client().get("/reports/reports.css")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/css")
    assert ".series-0" in r.text
