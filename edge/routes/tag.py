"""GET /dea/tag.js (and its pinnable versioned URL) and the demo publisher page.

The tag is built once, with the context (``ctx.tag``): rendered for this edge's public URL,
minified, precompressed and hashed (``tag.builder``). Requests only pick a representation:
brotli, gzip or identity by ``Accept-Encoding``, each with its own strong ETag.

- ``/dea/tag.js`` is the moving "latest" URL: cached briefly (publishers pick up a new tag
  within minutes) and revalidated with ``If-None-Match``.
- ``/dea/tag.<version>.js`` names exact bytes: cached for a year, ``immutable``, pinnable
  with ``<script integrity="sha384-..." crossorigin="anonymous">`` (SRI on a cross-origin
  script needs CORS, hence ``Access-Control-Allow-Origin: *``; no credentials are involved).
- ``/dea/tag.json`` tells a publisher (or a QA kit) the current version, URL and integrity.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge.context import Context
from edge.errors import NotFound
from edge.http import json_response
from edge.openapi import error_response, json_body
from tag import TagBuild
from tag.demo import ASSETS as DEMO_ASSETS
from tag.demo import PAGE_PATH as DEMO_PATH
from tag.demo import DemoPage

TAG_PATH = "/dea/tag.js"
VERSIONED_PATH = "/dea/tag.{version}.js"
MANIFEST_PATH = "/dea/tag.json"
DEMO_PUBLISHER = "demo"
LATEST_CACHE = "public, max-age=300, stale-while-revalidate=86400"
PINNED_CACHE = "public, max-age=31536000, immutable"
JS_TYPE = "text/javascript; charset=utf-8"
# Open through the production geofence (edge.app): the demo page is not an API call.
# The tag script, its versioned URL and /dea/tag.json are open by their /dea/tag. prefix.
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


def _serve_tag(build: TagBuild, request: Request, cache_control: str) -> Response:
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
    return Response(body, headers=headers, media_type=JS_TYPE)


def routes(ctx: Context) -> list[BaseRoute]:
    demo = DemoPage(ctx.settings.base_url, ctx.tag, publisher=DEMO_PUBLISHER)
    return [
        Route(TAG_PATH, partial(latest, ctx), methods=["GET"]),
        Route(MANIFEST_PATH, partial(tag_manifest, ctx), methods=["GET"]),
        Route(VERSIONED_PATH, partial(pinned, ctx), methods=["GET"]),
        *demo.routes(),
    ]


async def latest(ctx: Context, request: Request) -> Response:
    return _serve_tag(ctx.tag, request, LATEST_CACHE)


async def pinned(ctx: Context, request: Request) -> Response:
    build = ctx.tag
    version = request.path_params["version"]
    if version != build.version:
        raise NotFound(
            f"this edge serves tag version {build.version}, not {version}", field="version"
        )
    return _serve_tag(build, request, PINNED_CACHE)


async def tag_manifest(ctx: Context, request: Request) -> Response:
    build = ctx.tag
    manifest = {
        "version": build.version,
        "url": ctx.settings.base_url + TAG_PATH,
        "versioned_url": ctx.settings.base_url + VERSIONED_PATH.format(version=build.version),
        "integrity": build.sri,
        "sizes": build.sizes(),
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
                    "description": f"This process serves version `{build.version}` "
                    f'(`integrity="{build.sri}"`); other versions are 404.',
                    "tags": tags,
                    "parameters": [
                        {
                            "name": "version",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "example": build.version},
                        }
                    ],
                    "responses": {**_TAG_RESPONSES, "404": error_response("Not this version")},
                }
            },
            MANIFEST_PATH: {
                "get": {
                    "summary": "Current tag version, URLs and SRI hash",
                    "tags": tags,
                    "responses": {
                        "200": json_body(
                            {
                                "type": "object",
                                "required": ["version", "url", "versioned_url", "integrity"],
                                "properties": {
                                    "version": {"type": "string"},
                                    "url": {"type": "string"},
                                    "versioned_url": {"type": "string"},
                                    "integrity": {"type": "string", "pattern": "^sha384-"},
                                    "sizes": {
                                        "type": "object",
                                        "additionalProperties": {"type": "integer"},
                                    },
                                },
                            },
                            "The tag manifest",
                        )
                    },
                }
            },
            **DemoPage.openapi_paths(),
        }
    }
