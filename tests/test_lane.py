"""The beacon lane: every durable beacon is answered by it, and every answer is the one the
Starlette stack behind it gives the same request (status, headers in order, body)."""

from __future__ import annotations

import json
import uuid
from urllib.parse import urlsplit

import pytest
from starlette.testclient import TestClient

from edge.beacons import ai_beacon_urls, ai_click_url
from edge.delivery import events
from edge.lane import BeaconLane
from edge.routes import dea
from tests.conftest import AI_SCOPE, US_CLIENT, assert_error_shape
from tests.delivery.helpers import ORIGIN, register
from tests.delivery.test_events import imp_body, token

GB_CLIENT = ("81.2.69.160", 40000)


def lane_of(client: TestClient) -> BeaconLane:
    lane = client.app.lane
    assert isinstance(lane, BeaconLane)
    return lane


def stack_client(client: TestClient, peer=US_CLIENT) -> TestClient:
    """A client of the same started app with the lane taken out: the Starlette stack."""
    lane = lane_of(client)

    async def stack(scope, receive, send):
        scope["app"] = client.app
        await lane.app(scope, receive, send)

    return TestClient(stack, client=peer, raise_server_exceptions=False)


def same(a, b) -> None:
    assert a.status_code == b.status_code, (a.text, b.text)
    assert a.headers.raw == b.headers.raw
    assert a.content == b.content


@pytest.fixture
def client(make_client):
    c = make_client()
    register(c)
    return c


def ai_urls(client):
    ctx = client.app.state.ctx
    render, view = ai_beacon_urls(
        ctx.signer, "http://testserver", 7, f"m-{uuid.uuid4()}", "c1", scope=AI_SCOPE
    )
    click = ai_click_url(
        ctx.signer, "http://testserver", 7, f"m-{uuid.uuid4()}", "c1", scope=AI_SCOPE
    )
    return [urlsplit(u) for u in (render, view, click)]


@pytest.mark.parametrize("env", ["production", "sandbox"])
def test_every_beacon_route_is_answered_by_the_lane(make_client, env):
    client = make_client(env=env)
    lane = lane_of(client)
    served = {p for _, p in lane.endpoints}
    # The stack's routes of those paths, every method: none of them is left to the stack.
    beacons = {(m, r.path) for r in client.app.routes if r.path in served for m in r.methods}
    posts = (dea.URL_IMPRESSION, dea.FAILURES, dea.HOVER, dea.UGC_IMPRESSION, dea.URL_CLICK,
             dea.UGC_CLICK)  # fmt: skip
    expected = {("POST", p) for p in posts}
    expected |= {("GET", dea.UGC_IMPRESSION), ("GET", dea.UGC_CLICK)}
    if env == "production":
        expected |= {("GET", dea.AI_RENDER), ("GET", dea.AI_VIEW), ("GET", dea.AI_CLICK)}
    assert set(lane.endpoints) == expected == beacons
    for method, path in sorted(expected):
        before = lane.handled[path]
        r = client.request(method, path, content=b"{}", headers={"Content-Type": "text/plain"})
        assert_error_shape(r, 400)  # the handler's own validation answered
        assert lane.handled[path] == before + 1, path


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("OPTIONS", dea.URL_IMPRESSION, 403),  # a preflight (origin not registered)
        ("HEAD", dea.UGC_IMPRESSION, 405),
        ("PUT", dea.URL_CLICK, 405),
        ("POST", dea.URL_IMPRESSION + "/", 307),
        ("POST", "/dea/url/nope", 404),
        ("POST", dea.KEYWORDS, 415),
    ],
)
def test_everything_else_goes_to_the_stack_unchanged(client, method, path, status):
    lane = lane_of(client)
    before = sum(lane.handled.values())
    headers = {"Origin": "https://other.example", "Access-Control-Request-Method": "POST"}
    r = client.request(method, path, headers=headers, follow_redirects=False)
    assert r.status_code == status, r.text
    assert sum(lane.handled.values()) == before
    same(r, stack_client(client).request(method, path, headers=headers, follow_redirects=False))


def _text(body: bytes, ctype: str = "text/plain"):
    return lambda: {"content": body, "headers": {"Content-Type": ctype}}


def _cases(client):
    """(method, path, kwargs) triples, each sent once to the lane and once to the stack; a
    counted beacon gets a fresh token per call, so both answers count."""
    big = b"x" * (client.app.state.ctx.settings.max_body_bytes + 1)
    registered = {"Origin": ORIGIN}
    other = {"Origin": "https://not-registered.example"}

    def imp(surface="url", headers=None):
        body = imp_body(token(client, surface), str(uuid.uuid4()))
        return lambda: {"json": body, "headers": headers or {}}

    def click():
        body = {"impression_token": token(client), "click_id": uuid.uuid4().hex}
        return {"json": body, "headers": registered}

    def hover():
        return {"json": {"impression_token": token(client), "hover_ms": 500}}

    return [
        ("POST", dea.URL_IMPRESSION, lambda: imp()()),
        ("POST", dea.UGC_IMPRESSION, lambda: imp("ugc", registered)()),
        ("POST", dea.URL_IMPRESSION, lambda: imp("url", other)()),
        ("GET", dea.UGC_IMPRESSION, lambda: {"params": {"t": token(client, "ugc")}}),
        ("GET", dea.UGC_IMPRESSION, lambda: {"params": {"t": "forged", "x": "1"}}),
        ("POST", dea.URL_IMPRESSION, lambda: {"json": imp_body("forged")}),
        ("POST", dea.URL_IMPRESSION, lambda: {**imp()(), "params": {"x": "1"}}),
        ("POST", dea.UGC_IMPRESSION, lambda: {**imp("ugc", registered)(), "params": {"x": "1"}}),
        ("POST", dea.HOVER, lambda: {**hover(), "params": {"debug": ""}}),
        ("POST", dea.URL_IMPRESSION, _text(b"{")),
        ("POST", dea.URL_IMPRESSION, _text(b"{}", "image/png")),
        ("POST", dea.URL_IMPRESSION, _text(big)),
        ("POST", dea.HOVER, hover),
        ("POST", dea.URL_CLICK, click),
        ("POST", dea.FAILURES, lambda: {"json": {}, "headers": registered}),
        *[
            ("GET", path, lambda i=i: {"params": ai_urls(client)[i].query})
            for i, path in enumerate((dea.AI_RENDER, dea.AI_VIEW, dea.AI_CLICK))
        ],
    ]


def test_the_lane_answers_as_the_stack_does(client):
    for method, path, kwargs in _cases(client):
        a = client.request(method, path, **kwargs())
        b = stack_client(client).request(method, path, **kwargs())
        same(a, b)


def test_the_geofence_refuses_in_the_lane_as_in_the_stack(client):
    lane = lane_of(client)
    before = lane.handled[dea.URL_IMPRESSION]
    body = imp_body(token(client))
    headers = {"Origin": ORIGIN}
    gb = TestClient(client.app, client=GB_CLIENT, raise_server_exceptions=False)
    a = gb.post(dea.URL_IMPRESSION, json=body, headers=headers)
    assert_error_shape(a, 403, "geo_restricted")
    assert a.headers["access-control-allow-origin"] == ORIGIN  # the tag can read the 403
    assert lane.handled[dea.URL_IMPRESSION] == before + 1
    same(a, stack_client(client, GB_CLIENT).post(dea.URL_IMPRESSION, json=body, headers=headers))


def test_the_served_lane_answers_beacons_in_front_and_passes_the_rest(client):
    """What a server runs (``EdgeApp.serving``): the lane answers its beacons with nothing
    in front of it, as the app does, and hands everything else to the app it is given."""
    lane = lane_of(client)
    passed: list[str] = []

    async def outer(scope, receive, send):
        passed.append(scope["path"])
        await client.app(scope, receive, send)

    served = TestClient(client.app.serving(outer), client=US_CLIENT)
    headers = {"Origin": ORIGIN}
    before = lane.handled[dea.URL_IMPRESSION]
    a = served.post(dea.URL_IMPRESSION, json=imp_body(token(client), "imp-front-1"),
                    headers=headers)  # fmt: skip
    b = client.post(dea.URL_IMPRESSION, json=imp_body(token(client), "imp-front-2"),
                    headers=headers)  # fmt: skip
    same(a, b)
    assert a.json() == {"acknowledged": True, "counted": True}
    refused = served.post(dea.URL_IMPRESSION, content=b"{}", headers=headers)
    same(refused, client.post(dea.URL_IMPRESSION, content=b"{}", headers=headers))
    assert lane.handled[dea.URL_IMPRESSION] == before + 4  # one count, shared
    assert passed == []
    health = served.get("/dea/health")
    assert health.status_code == 200
    same(health, client.get("/dea/health"))
    assert passed == ["/dea/health"]


def test_an_unexpected_error_is_the_same_500_in_the_lane(client, monkeypatch, caplog):
    ctx = client.app.state.ctx

    def boom(*args, **kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(ctx.traffic, "classify_impression", boom)
    headers = {"Origin": ORIGIN}
    a = client.post(dea.URL_IMPRESSION, json=imp_body(token(client)), headers=headers)
    assert_error_shape(a, 500, "internal_error")
    assert "secret" not in a.text and a.headers["x-content-type-options"] == "nosniff"
    b = stack_client(client).post(dea.URL_IMPRESSION, json=imp_body(token(client)), headers=headers)
    same(a, b)
    assert sum("secret internals" in str(r.exc_info) for r in caplog.records if r.exc_info) == 2


def test_the_sandbox_lane_has_no_geofence(make_client):
    client = make_client(env="sandbox")
    register(client)
    gb = TestClient(client.app, client=GB_CLIENT, raise_server_exceptions=False)
    body = imp_body(token(client), "imp-sandbox-1")
    r = gb.post(dea.URL_IMPRESSION, json=body)
    assert r.status_code == 200 and r.json() == {"acknowledged": True, "counted": True}
    assert lane_of(client).fence is None


def test_the_lane_refuses_paths_outside_dea():
    async def app(scope, receive, send):
        raise AssertionError("not called")

    async def endpoint(request):
        raise AssertionError("not called")

    from edge.middleware.headers import HeaderRules

    with pytest.raises(ValueError, match="/dea/"):
        BeaconLane(app, endpoints={("POST", "/v1/x"): endpoint}, headers=HeaderRules(),
                   registered_origin=lambda o: None)  # fmt: skip


def _asgi(client: TestClient, app, path: str, messages: list[dict], headers: dict[str, str]):
    """Send one request to ``app`` with ``messages`` as what ``receive`` gives (then a
    disconnect), in the started app's event loop; its (status, headers, body)."""
    sent: list[dict] = []

    async def call():
        pending = list(messages)

        async def receive():
            return pending.pop(0) if pending else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
            "root_path": "", "query_string": b"", "client": US_CLIENT,
            "server": ("testserver", 80), "app": client.app, "state": {},
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        }  # fmt: skip
        await app(scope, receive, send)

    client.portal.call(call)
    start, body = sent
    return start["status"], start["headers"], body["body"]


@pytest.mark.parametrize("ctype", ["application/json", "text/plain;charset=UTF-8"])
def test_a_body_in_chunks_is_read_as_the_stack_reads_it(client, ctype):
    lane = lane_of(client)
    assert set(lane.direct) == {("POST", dea.URL_IMPRESSION), ("POST", dea.UGC_IMPRESSION)}
    big = client.app.state.ctx.settings.max_body_bytes

    def cases():
        raw = json.dumps(imp_body(token(client), str(uuid.uuid4()))).encode()
        parts = [raw[:5], b"", raw[5:40], raw[40:]]
        yield [{"type": "http.request", "body": p, "more_body": True} for p in parts] + [
            {"type": "http.request", "body": b"", "more_body": False}
        ]
        yield [{"type": "http.request", "body": b"x" * big, "more_body": True},
               {"type": "http.request", "body": b"x", "more_body": True}]  # fmt: skip
        yield [{"type": "http.request", "body": b'{"impression_token":', "more_body": True}]

    statuses = []
    for make in (cases, cases):
        for lane_messages, stack_messages in zip(make(), make(), strict=True):
            before = lane.handled[dea.URL_IMPRESSION]
            headers = {"Content-Type": ctype, "Origin": ORIGIN}
            a = _asgi(client, lane, dea.URL_IMPRESSION, lane_messages, headers)
            assert lane.handled[dea.URL_IMPRESSION] == before + 1
            b = _asgi(client, lane.app, dea.URL_IMPRESSION, stack_messages, headers)
            assert a == b
            statuses.append(a[0])
    assert statuses == [200, 413, 500] * 2  # counted; too large; the client went away


def test_the_impression_answers_are_the_routes_responses(client):
    for counted in (True, False):
        status, headers, body = events.IMPRESSION_ANSWERS[counted]
        assert status == 200 and json.loads(body) == {"acknowledged": True, "counted": counted}
        assert dict(headers)[b"content-type"] == b"application/json"


def test_finished_impression_answers_stay_the_stacks_as_origins_alternate(client):
    # The direct form's headers are finished once per origin granted and reused: each
    # answer, the first and the repeated, counted or a replay, is still the stack's.
    lane = lane_of(client)
    origins = [{"Origin": ORIGIN}, {}, {"Origin": "https://not-registered.example"}]
    for _ in range(2):
        for headers in origins:
            for surface, path in (("url", dea.URL_IMPRESSION), ("ugc", dea.UGC_IMPRESSION)):
                lane_token, stack_token = token(client, surface), token(client, surface)
                for _ in range(2):  # counted, then a replay of the token
                    body = imp_body(lane_token, str(uuid.uuid4()))
                    a = client.post(path, json=body, headers=headers)
                    body = imp_body(stack_token, str(uuid.uuid4()))
                    same(a, stack_client(client).post(path, json=body, headers=headers))
    assert len(lane._finished) == 2 * 2 * 2  # paths, answers, grants (one, or none)
    for n in range(3000):
        lane._finish(dea.URL_IMPRESSION, (), f"https://{n}.example")
    assert len(lane._finished) <= 1024


def test_a_finished_answer_is_never_reused_for_other_headers_of_the_same_identity(client):
    # Finished answers are found by the headers' identity; an entry made for headers that
    # are gone, whose identity now belongs to other headers, must not be served for them.
    lane = lane_of(client)
    gone = ((b"content-type", b"text/plain"),)
    now = ((b"content-type", b"application/json"), (b"x-other", b"1"))
    stale = lane._finish(dea.URL_IMPRESSION, gone, None)
    lane._finished[(dea.URL_IMPRESSION, id(now), None)] = (gone, stale)
    finished = lane._finish(dea.URL_IMPRESSION, now, None)
    assert finished[:2] == now and finished != stale


def test_a_run_of_refused_impressions_shares_one_finished_answer(client):
    # An error's answer is made per request; equal ones share one finished entry (by
    # value), so a flood of refused beacons neither grows the cache nor empties it.
    lane = lane_of(client)
    body = imp_body("not-a-token")
    first = client.post(dea.URL_IMPRESSION, json=body, headers={"Origin": ORIGIN})
    assert_error_shape(first, 400)
    size = len(lane._finished)
    for _ in range(5):
        r = client.post(dea.URL_IMPRESSION, json=body, headers={"Origin": ORIGIN})
        same(r, first)
    assert len(lane._finished) == size
    same(
        first, stack_client(client).post(dea.URL_IMPRESSION, json=body, headers={"Origin": ORIGIN})
    )


def test_body_headers_that_passed_are_remembered_and_refusals_made_afresh(monkeypatch):
    """The direct form's body headers: a set of values that passed is not checked again,
    one that is refused is refused every time (each refusal checked anew)."""
    import asyncio

    from edge import http
    from edge.errors import EdgeError

    checked: list[tuple[object, ...]] = []
    check = http.check_body_headers

    def counting(*args, **kw):
        checked.append(args)
        return check(*args, **kw)

    monkeypatch.setattr(http, "check_body_headers", counting)
    http._check_raw_body_headers.cache_clear()

    def read(ctype: bytes, body: bytes = b"{}") -> bytes:
        scope = {"headers": [(b"content-type", ctype),
                             (b"content-length", str(len(body)).encode())]}  # fmt: skip

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        return asyncio.run(http.receive_body(scope, receive, max_bytes=64))

    assert read(b"application/json") == b"{}" and read(b"application/json") == b"{}"
    assert len(checked) == 1  # the second time from memory
    for _ in range(2):
        with pytest.raises(EdgeError):
            read(b"text/html")
    assert len(checked) == 3
    with pytest.raises(EdgeError):
        read(b"application/json", b"x" * 65)  # over the limit: its own length, refused
    assert len(checked) == 4


class _Owner:
    """What ``send`` is bound to: ``send_whole`` takes the answer or declines it."""

    def __init__(self, takes: bool) -> None:
        self.takes = takes
        self.taken: list[tuple[int, object, bytes]] = []
        self.sent: list[dict] = []

    async def send(self, message):
        self.sent.append(message)

    def send_whole(self, status, finished, content):
        self.taken.append((status, finished, content))
        return self.takes


def test_the_lane_hands_its_answer_whole_to_a_send_whose_owner_takes_it(client):
    """A ``send`` bound to an object with ``send_whole`` (``edge serve``'s response cycle)
    is handed the direct form's finished answer in one call; where that declines, the lane
    sends the two messages as to any server. Either way the answer is the stack's."""
    import asyncio

    from edge.lane import Finished

    lane = lane_of(client)
    headers = {"Origin": ORIGIN, "Content-Type": "application/json"}
    first = json.dumps(imp_body(token(client), "imp-whole-ref"))
    ref = stack_client(client).post(dea.URL_IMPRESSION, headers=headers, content=first)
    for takes in (True, False):
        body = json.dumps(imp_body(token(client), f"imp-whole-{takes}")).encode()
        owner = _Owner(takes)
        scope = {
            "type": "http", "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": dea.URL_IMPRESSION, "root_path": "", "query_string": b"",
            "headers": [(b"origin", ORIGIN.encode()), (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())],
            "client": US_CLIENT, "server": ("testserver", 80), "state": {},
        }  # fmt: skip

        async def receive(body=body):
            return {"type": "http.request", "body": body, "more_body": False}

        asyncio.run(lane(scope, receive, owner.send))
        assert len(owner.taken) == 1
        status, finished, content = owner.taken[0]
        assert (status, list(finished), content) == (ref.status_code, ref.headers.raw, ref.content)
        if takes:
            assert owner.sent == []
        else:
            sent = owner.sent
            assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
            assert type(sent[0]["headers"]) is Finished and sent[0]["headers"] == ref.headers.raw
            assert sent[1]["body"] == ref.content
