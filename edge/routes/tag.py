"""GET /dea/tag.js (and its pinnable versioned URL) and the demo publisher page.

The tag is built once, with the context (``ctx.tag``): rendered for this edge's public URL,
minified, precompressed and hashed (``tag.builder``). Requests only pick a representation:
brotli, gzip or identity by ``Accept-Encoding``, each with its own strong ETag.

- ``/dea/tag.js`` is the moving "latest" URL: cached briefly (publishers pick up a new tag
  within minutes) and revalidated with ``If-None-Match``.
- ``/dea/tag.<version>.js`` names exact bytes: cached for a year, ``immutable``, pinnable
  with ``<script integrity="sha384-..." crossorigin="anonymous">`` (SRI on a cross-origin
  script needs CORS, hence ``Access-Control-Allow-Origin: *``; no credentials are involved).
  Earlier versions this edge built are served from the store for the retention time
  (``edge.tag_versions``), then answer 410.
- ``/dea/tag.json`` tells a publisher (or a QA kit) the current version, URL and integrity,
  and lists every version still served.
- ``/dea/tag.debug.js`` is the same tag logging each decision to the console; the normal
  tag loads it (as a module, same origin) when the page asks with ``data-debug`` or
  ``?edge_debug=1``. Cached like the latest URL.
- ``/dea/tag.css`` is an optional default stylesheet for the tag's classes (a normal
  stylesheet: no inline style needed), cached like the latest URL.
"""

from __future__ import annotations

import datetime as dt
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge.context import Context
from edge.http import json_response
from edge.openapi import error_response, json_body
from tag import TagBuild
from tag.demo import ASSETS as DEMO_ASSETS
from tag.demo import PAGE_PATH as DEMO_PATH
from tag.demo import DemoPage

TAG_PATH = "/dea/tag.js"
VERSIONED_PATH = "/dea/tag.{version}.js"
MANIFEST_PATH = "/dea/tag.json"
DEBUG_PATH = "/dea/tag.debug.js"
CSS_PATH = "/dea/tag.css"
DEMO_PUBLISHER = "demo"
LATEST_CACHE = "public, max-age=300, stale-while-revalidate=86400"
PINNED_CACHE = "public, max-age=31536000, immutable"
JS_TYPE = "text/javascript; charset=utf-8"
CSS_TYPE = "text/css; charset=utf-8"
# Open through the production geofence (edge.app): the demo page is not an API call.
# The tag script, its versioned and debug URLs, the stylesheet and /dea/tag.json are open by
# their /dea/tag. prefix.
PUBLIC_PATHS = (DEMO_PATH, *DEMO_ASSETS)
# Ours first on a tie: brotli is smallest, identity the fallback.
_PREFERENCE = ("br", "gzip", "identity")


def negotiate(accept_encoding: str | None) -> str:
    """``br``, ``gzip`` or ``identity`` for an ``Accept-Encoding`` value (RFC 9110 12.5.3)."""
    if not accept_encoding:
        return "identity"
    q: dict[str, float] = {}
    for item in accept_encoding.split(","):
        name, _, params = item.strip().partition(";")
        name = name.strip().lower()
        if not name:
            continue
        given = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    given = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    given = 0.0
        q[name] = max(given, q.get(name, 0.0))
    star = q.get("*")

    def weight(coding: str) -> float:
        if coding in q:
            return q[coding]
        if coding == "identity":  # acceptable unless refused explicitly or by "*;q=0"
            return 0.001 if star is None or star > 0 else 0.0
        return star or 0.0

    best = max(_PREFERENCE, key=lambda c: (weight(c), -_PREFERENCE.index(c)))
    # Nothing acceptable at all: identity anyway (RFC 9110 allows it; a 406 helps no one).
    return best if weight(best) > 0 else "identity"


def _etag_matches(if_none_match: str, etag: str) -> bool:
    """Weak comparison, as RFC 9110 13.1.2 prescribes for If-None-Match."""
    if if_none_match.strip() == "*":
        return True
    bare = etag.removeprefix("W/")
    return any(t.strip().removeprefix("W/") == bare for t in if_none_match.split(","))


def _serve_tag(
    build: TagBuild, request: Request, cache_control: str, media_type: str = JS_TYPE
) -> Response:
    coding = negotiate(request.headers.get("accept-encoding"))
    body = {"br": build.br, "gzip": build.gzip, "identity": build.js}[coding]
    etag = f'"{build.digest[:32]}-{coding}"' if coding != "identity" else f'"{build.digest[:32]}"'
    headers = {
        "ETag": etag,
        "Cache-Control": cache_control,
        "Vary": "Accept-Encoding",
        "Access-Control-Allow-Origin": "*",
        "Cross-Origin-Resource-Policy": "cross-origin",
        "X-Content-Type-Options": "nosniff",
        "X-Tag-Version": build.version,
    }
    inm = request.headers.get("if-none-match")
    if inm is not None and _etag_matches(inm, etag):
        return Response(status_code=304, headers=headers)
    if coding != "identity":
        headers["Content-Encoding"] = coding
    return Response(body, headers=headers, media_type=media_type)


def routes(ctx: Context) -> list[BaseRoute]:
    demo = DemoPage(ctx.settings.base_url, ctx.tag, publisher=DEMO_PUBLISHER)
    return [
        Route(TAG_PATH, partial(latest, ctx), methods=["GET"]),
        Route(MANIFEST_PATH, partial(tag_manifest, ctx), methods=["GET"]),
        Route(DEBUG_PATH, partial(debug_build, ctx), methods=["GET"]),  # before tag.<version>.js
        Route(CSS_PATH, partial(stylesheet, ctx), methods=["GET"]),
        Route(VERSIONED_PATH, partial(pinned, ctx), methods=["GET"]),
        *demo.routes(),
    ]


async def latest(ctx: Context, request: Request) -> Response:
    return _serve_tag(ctx.tag, request, LATEST_CACHE)


async def debug_build(ctx: Context, request: Request) -> Response:
    return _serve_tag(ctx.tag_debug, request, LATEST_CACHE)


async def stylesheet(ctx: Context, request: Request) -> Response:
    return _serve_tag(ctx.tag_css, request, LATEST_CACHE, CSS_TYPE)


async def pinned(ctx: Context, request: Request) -> Response:
    version = request.path_params["version"]
    build = await ctx.tag_versions.build(ctx.store, version, ctx.clock())
    return _serve_tag(build, request, PINNED_CACHE)


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return (
        dt.datetime.fromtimestamp(epoch, dt.UTC)
        .isoformat(timespec="seconds")
        .replace("+00:00", "Z")
    )


async def tag_manifest(ctx: Context, request: Request) -> Response:
    build = ctx.tag
    base = ctx.settings.base_url
    now = ctx.clock()
    versions = [
        {
            "version": v.version,
            "url": base + VERSIONED_PATH.format(version=v.version),
            "integrity": v.integrity,
            "built_at": _iso(v.built_at),
            "expires": _iso(v.expires_at),
        }
        for v in await ctx.tag_versions.listing(ctx.store, now)
        if not v.expired(now)
    ]
    manifest = {
        "version": build.version,
        "url": base + TAG_PATH,
        "versioned_url": base + VERSIONED_PATH.format(version=build.version),
        "integrity": build.sri,
        "sizes": build.sizes(),
        "debug_url": base + DEBUG_PATH,
        "stylesheet": {"url": base + CSS_PATH, "integrity": ctx.tag_css.sri},
        "retention_days": ctx.settings.tag_retention_days,
        "versions": versions,
    }
    return json_response(
        manifest, headers={"Cache-Control": "no-cache", "Access-Control-Allow-Origin": "*"}
    )


_TAG_RESPONSES: dict[str, Any] = {
    "200": {
        "description": "The tag (brotli, gzip or identity by Accept-Encoding; Vary: "
        "Accept-Encoding; a strong ETag per representation)",
        "content": {"text/javascript": {"schema": {"type": "string"}}},
    },
    "304": {"description": "If-None-Match matched the representation's ETag"},
}


_VERSION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["version", "url", "integrity", "built_at", "expires"],
    "properties": {
        "version": {"type": "string"},
        "url": {"type": "string", "description": "The pinnable versioned URL"},
        "integrity": {"type": "string", "pattern": "^sha384-"},
        "built_at": {"type": "string", "format": "date-time"},
        "expires": {
            "type": ["string", "null"],
            "format": "date-time",
            "description": "When it stops being served (410); null: the running version, "
            "or the newest built while nothing newer is",
        },
    },
}


# The versions the edge built are kept in the database; while it does not answer, the
# manifest and a pinned earlier version cannot be read.
_STORE_DOWN = error_response("The database is not answering; retry after Retry-After seconds")


def openapi(ctx: Context) -> dict[str, Any]:
    build = ctx.tag
    tags = ["tag"]
    return {
        "paths": {
            TAG_PATH: {
                "get": {
                    "summary": "The browser tag, latest version (cached 5 minutes)",
                    "description": 'Embed with `<script async src=".../dea/tag.js" '
                    'data-publisher="ID">`. See docs/tag.md.',
                    "tags": tags,
                    "responses": _TAG_RESPONSES,
                }
            },
            VERSIONED_PATH: {
                "get": {
                    "summary": "The browser tag at one version (immutable, pin with integrity=)",
                    "description": f"This process runs version `{build.version}` "
                    f'(`integrity="{build.sri}"`). Earlier versions this edge built stay '
                    "served for `EDGE_TAG_RETENTION_DAYS` after a newer one was built "
                    "(`/dea/tag.json` lists them with their expiry); then 410 "
                    "`tag_version_expired`. A version it never built is 404.",
                    "tags": tags,
                    "parameters": [
                        {
                            "name": "version",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "example": build.version},
                        }
                    ],
                    "responses": {
                        **_TAG_RESPONSES,
                        "404": error_response("A version this edge never built"),
                        "410": error_response("An earlier version past its retention time"),
                        "503": _STORE_DOWN,
                    },
                }
            },
            DEBUG_PATH: {
                "get": {
                    "summary": "The browser tag's debug build (logs each decision)",
                    "description": "The same tag and version, logging each decision to the "
                    "console. The normal tag loads it when the page asks: `data-debug` on its "
                    "script, or `?edge_debug=1` on the page. See docs/tag.md.",
                    "tags": tags,
                    "responses": _TAG_RESPONSES,
                }
            },
            CSS_PATH: {
                "get": {
                    "summary": "Optional default stylesheet for the tag's ads",
                    "description": 'Link it with `<link rel="stylesheet" href=".../dea/tag.css">`;'
                    " it styles the tag's `edge-ad` classes and hides empty slots.",
                    "tags": tags,
                    "responses": {
                        "200": {
                            "description": "The stylesheet (brotli, gzip or identity by "
                            "Accept-Encoding; a strong ETag per representation)",
                            "content": {"text/css": {"schema": {"type": "string"}}},
                        },
                        "304": _TAG_RESPONSES["304"],
                    },
                }
            },
            MANIFEST_PATH: {
                "get": {
                    "summary": "Current tag version, URLs and SRI hash; every version served",
                    "tags": tags,
                    "responses": {
                        "200": json_body(
                            {
                                "type": "object",
                                "required": [
                                    "version",
                                    "url",
                                    "versioned_url",
                                    "integrity",
                                    "retention_days",
                                    "versions",
                                ],
                                "properties": {
                                    "version": {"type": "string"},
                                    "url": {"type": "string"},
                                    "versioned_url": {"type": "string"},
                                    "integrity": {"type": "string", "pattern": "^sha384-"},
                                    "sizes": {
                                        "type": "object",
                                        "additionalProperties": {"type": "integer"},
                                    },
                                    "debug_url": {
                                        "type": "string",
                                        "description": "The debug build (same version)",
                                    },
                                    "stylesheet": {
                                        "type": "object",
                                        "required": ["url", "integrity"],
                                        "properties": {
                                            "url": {"type": "string"},
                                            "integrity": {"type": "string"},
                                        },
                                    },
                                    "retention_days": {"type": "integer"},
                                    "versions": {
                                        "type": "array",
                                        "description": "Every version served, newest first",
                                        "items": _VERSION_SCHEMA,
                                    },
                                },
                            },
                            "The tag manifest",
                        ),
                        "503": _STORE_DOWN,
                    },
                }
            },
            **DemoPage.openapi_paths(),
        }
    }
