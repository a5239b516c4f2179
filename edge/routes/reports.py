"""GET /reports: the operator page (charts of the last 30 UTC days per campaign), behind an
Ad Manager key of this edge.

A browser signs in once: ``POST /reports/login`` with the key in a form sets a sealed
session cookie (``edge_reports``) and sends it back to the page; ``POST
/reports/logout`` ends it. A script may send the key in ``X-API-Key`` instead. Without
either, the page answers 401 with the sign-in form. A sign-in or sign-out posted from
another origin is refused (403), as the cookie is ``SameSite=Strict``.

The page is HTML with no script and a same-origin stylesheet (``/reports/reports.css``),
under ``Content-Security-Policy: default-src 'none'; style-src 'self'; ...``, and is never
cached.
"""

from __future__ import annotations

from functools import partial
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from edge.context import Context
from edge.delivery.requests import store_errors
from edge.errors import BadRequest, Forbidden, PayloadTooLarge, Unauthorized, UnsupportedMediaType
from edge.openapi import error_for
from edge.partner.schemas import RATE_HEADERS, keyed_error
from edge.reports import page as html
from edge.reports import session
from edge.reports.daily import DayRange
from edge.store import KeyRecord

PATH = "/reports"
CSS_PATH = html.STYLESHEET
LOGIN_PATH = html.LOGIN
LOGOUT_PATH = html.LOGOUT
DAYS = 30
PRODUCT = "ad-manager"
MAX_FORM_BYTES = 4096
MAX_FORM_FIELDS = 8
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
HTML_HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    # same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on the
    # sign-in form post, and the origin check below could not tell it from a foreign page.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
_CSS = resources.files("edge.reports").joinpath("reports.css").read_bytes()


def routes(ctx: Context) -> list[BaseRoute]:
    return [
        Route(PATH, partial(reports_page, ctx), methods=["GET"]),
        Route(CSS_PATH, partial(stylesheet, ctx), methods=["GET"]),
        Route(LOGIN_PATH, partial(sign_in, ctx), methods=["POST"]),
        Route(LOGOUT_PATH, partial(sign_out, ctx), methods=["POST"]),
    ]


async def reports_page(ctx: Context, request: Request) -> Response:
    try:
        operator = await _operator(ctx, request)
    except Unauthorized as exc:  # a script's X-API-Key that will not do
        return _html(html.login(exc.message), 401)
    if operator is None:
        return _html(html.login(), 401)
    # A script's keyed request spends its key's Ad Manager quota and is told what is left,
    # as on every keyed route (429 past it); a signed-in browser's page views do not.
    limits: dict[str, str] = {}
    if "x-api-key" in request.headers:
        limits = await ctx.rate_limits.admit(PRODUCT, operator.family)
        request.state.rate_limit_headers = limits
    now = ctx.clock()
    days = DayRange.last(DAYS, now)
    async with store_errors():
        rows = await ctx.store.daily_counts(
            days.since.isoformat(), days.until.isoformat(), ["campaign"]
        )
        totals = await ctx.store.counts(["campaign"])
    spent = {i: amount for _s, i, counter, amount in totals if counter == "billable_usd"}
    campaigns = ctx.matcher.catalogue.campaigns if ctx.matcher is not None else ()
    return _html(html.render(days, rows, campaigns, spent, now, ctx.settings.env), 200, limits)


async def stylesheet(ctx: Context, request: Request) -> Response:
    return Response(
        _CSS, media_type="text/css; charset=utf-8", headers={"Cache-Control": "no-cache"}
    )


async def sign_in(ctx: Context, request: Request) -> Response:
    _same_origin(ctx, request)
    form = await _form(request)
    key = form.get("key", "").strip()
    try:
        record = await ctx.keyring.verify(key, env=ctx.settings.env, product=PRODUCT)
    except Unauthorized as exc:
        return _html(html.login(exc.message), 401)
    assert ctx.signer is not None  # set at start-up
    cookie = session.set_cookie(session.seal(ctx.signer, record.key_id, ctx.clock()),
                                secure=_secure(ctx, request))  # fmt: skip
    return _redirect(cookie)


async def sign_out(ctx: Context, request: Request) -> Response:
    """Clear the cookie, and end its session on the edge: a copy of the cookie taken
    before is refused from now on, on every node."""
    _same_origin(ctx, request)
    assert ctx.signer is not None  # set at start-up
    now = ctx.clock()
    ended = session.unseal(ctx.signer, request.cookies.get(session.COOKIE), now)
    if ended is not None:
        async with store_errors():
            await ctx.store.end_session(ended.session_id, ended.expires_at, now)
    return _redirect(session.clear_cookie(secure=_secure(ctx, request)))


async def _operator(ctx: Context, request: Request) -> KeyRecord | None:
    """The Ad Manager key behind this request: its X-API-Key (``Unauthorized`` when it will
    not do), or the key of its session cookie while that key is valid; else None."""
    if "x-api-key" in request.headers:
        return await ctx.keyring.verify(
            request.headers["x-api-key"], env=ctx.settings.env, product=PRODUCT
        )
    assert ctx.signer is not None  # set at start-up
    now = ctx.clock()
    signed_in = session.unseal(ctx.signer, request.cookies.get(session.COOKIE), now)
    if signed_in is None:
        return None
    async with store_errors():
        if await ctx.store.session_ended(signed_in.session_id):
            return None
        record = await ctx.store.key_by_id(signed_in.key_id)
    if (
        record is None
        or not record.is_valid(now)
        or record.product != PRODUCT
        or record.env != ctx.settings.env
    ):
        return None
    return record


def _same_origin(ctx: Context, request: Request) -> None:
    """Refuse a form posted by another site's page (login CSRF); a request without
    ``Origin`` (curl, an old browser) is let through: it carries no cookie of ours. The
    origin's host must be the request's; behind an https ``EDGE_PUBLIC_BASE_URL`` its scheme
    must be https too (a page injected into plain http on the same host is another site)."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    host = request.headers.get("host", "")
    try:
        parts = urlsplit(origin)
    except ValueError:
        parts = urlsplit("")
    https_only = ctx.settings.base_url.startswith("https://")
    if not host or parts.netloc.lower() != host.lower() or (https_only and parts.scheme != "https"):
        raise Forbidden("sign-in and sign-out are taken from this edge's own page only")


async def _form(request: Request) -> dict[str, str]:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise UnsupportedMediaType(
            "Content-Type must be application/x-www-form-urlencoded", field="Content-Type"
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise PayloadTooLarge(f"the body is larger than {MAX_FORM_BYTES} bytes")
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=MAX_FORM_FIELDS)
    except ValueError:  # more fields than the limit
        raise BadRequest(f"the form has more than {MAX_FORM_FIELDS} fields") from None
    return {name: values[0] for name, values in fields.items() if values}


def _secure(ctx: Context, request: Request) -> bool:
    return request.url.scheme == "https" or ctx.settings.base_url.startswith("https://")


def _html(body: str, status: int = 200, extra: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers={**HTML_HEADERS, **(extra or {})})


def _redirect(cookie: str) -> Response:
    response = RedirectResponse(PATH, status_code=303, headers={"Cache-Control": "no-store"})
    response.headers.append("Set-Cookie", cookie)
    return response


SIGN_IN_401 = "The sign-in form: no session, or an unusable X-API-Key (the form says why)"


def openapi(ctx: Context) -> dict[str, Any]:
    """Operator pages, listed for completeness: HTML for people, not part of a partner
    integration, so they take no ``ApiKey`` security scheme (a session cookie instead)."""
    tags = ["operator"]
    page = {"description": "HTML (no script), under a strict CSP",
            "content": {"text/html": {"schema": {"type": "string"}}}}  # fmt: skip
    form = {
        "required": True,
        "content": {
            "application/x-www-form-urlencoded": {
                "schema": {
                    "type": "object",
                    "properties": {"key": {"type": "string", "description": "Ad Manager key"}},
                }
            }
        },
    }
    see_other = {"description": "Signed in (or out): a session cookie is set (or cleared) "
                 "and the browser is sent to /reports"}  # fmt: skip
    return {
        "paths": {
            PATH: {
                "get": {
                    "summary": "Operator reports: the last 30 UTC days per campaign, as charts",
                    "description": __doc__,
                    "tags": tags,
                    "responses": {
                        "200": {
                            **page,
                            "description": f"{page['description']} (with X-API-Key: the "
                            "key's RateLimit headers, as on every keyed route)",
                            "headers": RATE_HEADERS,
                        },
                        "401": {**page, "description": SIGN_IN_401},
                        "429": keyed_error(429),
                        "503": error_for(503),
                    },
                }
            },
            CSS_PATH: {
                "get": {
                    "summary": "The reports page's stylesheet",
                    "tags": tags,
                    "responses": {
                        "200": {
                            "description": "CSS",
                            "content": {"text/css": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
            LOGIN_PATH: {
                "post": {
                    "summary": "Sign in to the reports page with an Ad Manager key",
                    "tags": tags,
                    "requestBody": form,
                    "responses": {
                        "303": see_other,
                        "401": {**page, "description": "The sign-in form, saying why not"},
                        **{str(s): error_for(s) for s in (400, 403, 413, 415)},
                    },
                }
            },
            LOGOUT_PATH: {
                "post": {
                    "summary": "Sign out of the reports page",
                    "tags": tags,
                    "responses": {"303": see_other, "403": error_for(403)},
                }
            },
        }
    }
