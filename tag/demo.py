"""The demo publisher page the edge serves at ``/demo`` (``make run`` prints its URL).

A small magazine page that embeds the tag exactly as a publisher would (pinned version,
``integrity=``), with page-level slots (one below the fold), a UGC thread whose posts have
their own slots, and a button that adds a slot later, as a single-page app would. It is
served under a strict CSP with Trusted Types enforced, so it also shows the policy a
publisher needs. The page is rendered once, at start-up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tag.builder import TagBuild

DEMO_DIR = Path(__file__).parent / "demo"
PAGE_PATH = "/demo"
ASSETS = {
    "/demo/demo.css": "text/css; charset=utf-8",
    "/demo/demo.js": "text/javascript; charset=utf-8",
}


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def demo_csp(edge_origin: str) -> str:
    """The policy the demo page is served with: what a strict publisher page needs."""
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src 'self' {edge_origin}",
            "style-src 'self'",
            # Ad pixels are images from the advertisers' vendors.
            "img-src 'self' https: data:",
            f"connect-src 'self' {edge_origin}",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
            "require-trusted-types-for 'script'",
            "trusted-types 'none'",
        )
    )


class DemoPage:
    def __init__(self, base_url: str, build: TagBuild, *, publisher: str) -> None:
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(DEMO_DIR), autoescape=True, keep_trailing_newline=True
        )
        edge_origin = origin_of(base_url)
        self.html = (
            env.get_template("page.html.j2")
            .render(
                tag_url=f"{base_url}/dea/tag.{build.version}.js",
                integrity=build.sri,
                version=build.version,
                publisher=publisher,
                base_url=base_url,
            )
            .encode()
        )
        self.headers = {
            "Content-Security-Policy": demo_csp(edge_origin),
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "strict-origin-when-cross-origin",
        }
        self.assets = {path: (DEMO_DIR / Path(path).name).read_bytes() for path in ASSETS}

    def routes(self) -> list[BaseRoute]:
        async def page(request: Request) -> Response:
            return Response(self.html, headers=self.headers, media_type="text/html")

        def asset(path: str) -> Callable[[Request], Awaitable[Response]]:
            body, media_type = self.assets[path], ASSETS[path]

            async def serve(request: Request) -> Response:
                return Response(body, media_type=media_type, headers={"Cache-Control": "no-cache"})

            return serve

        return [
            Route(PAGE_PATH, page, methods=["GET"]),
            *(Route(path, asset(path), methods=["GET"]) for path in ASSETS),
        ]

    @staticmethod
    def openapi_paths() -> dict[str, Any]:
        paths: dict[str, Any] = {
            PAGE_PATH: {
                "get": {
                    "summary": "Demo publisher page embedding the tag (publisher id `demo`)",
                    "tags": ["tag"],
                    "responses": {
                        "200": {
                            "description": "HTML, served with a strict CSP",
                            "content": {"text/html": {"schema": {"type": "string"}}},
                        }
                    },
                }
            }
        }
        for path, media_type in ASSETS.items():
            kind = media_type.split(";")[0]
            paths[path] = {
                "get": {
                    "summary": "Demo page asset",
                    "tags": ["tag"],
                    "responses": {
                        "200": {
                            "description": "The asset",
                            "content": {kind: {"schema": {"type": "string"}}},
                        }
                    },
                }
            }
        return paths
