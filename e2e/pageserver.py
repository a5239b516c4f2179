"""The publisher side of the e2e tests: test pages on their own origin, and a pixel counter.

Pages are Jinja templates in ``pages/``: ``article``, and ``frame`` (a page without the tag
whose first screen is an iframe of the article with the same knobs), with query-string knobs
(STYLE 15):

- ``pub``: the publisher id the tag is embedded with
- ``topic``: ``running``, ``pets``, ``cooking``, ``coffee`` or ``news`` (brand-unsafe)
- ``size``: ``medium`` (300x200 ad), ``large`` (970x250 = 242,500 px²), ``zero`` (0x0) or
  ``flat`` (300x0)
- ``slot``: ``1`` (default) a page-level slot below a tall spacer, ``0`` none at load
- ``ids``: more page-level slots after it, with these ids (comma-separated, in this order;
  an empty item is an empty ``data-ad-slot``)
- ``ugc``: a UGC post with its own slot, about this topic
- ``csp``: ``strict`` (nonce'd tag, connect-src naming the edge, Trusted Types enforced) or
  ``no-edge`` (the same, without the edge in connect-src)
- ``pin``: ``1`` embeds the versioned tag URL with its ``integrity=`` hash (from
  ``/dea/tag.json``), ``bad`` the same with a wrong hash
- ``hidden``: ``1`` the page starts hidden (document.visibilityState stubbed, as web-vitals'
  test pages do); ``window.__setVisibility("visible")`` shows it
- ``css``: ``1`` links the edge's optional stylesheet (``/dea/tag.css``)
- ``debug``: ``1`` puts ``data-debug`` on the tag's script (``edge_debug=1`` in the page's own
  query string asks for the debug build too)

``/px/<ad_id>`` answers a 1x1 GIF and counts the fire for the publisher of the page that
fired it (from the Referer's ``pub``).
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import jinja2

from edge.qa.beacons import wait_until

PAGES = Path(__file__).parent / "pages"
GIF = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
STATIC_TYPES = {".css": "text/css", ".js": "text/javascript"}


def csp_for(knob: str, edge: str, nonce: str) -> str | None:
    if knob not in ("strict", "no-edge"):
        return None
    connect = edge if knob == "strict" else "'self'"
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src 'nonce-{nonce}'",
            f"connect-src {connect}",
            "img-src 'self'",
            f"style-src 'self' {edge}",
            "base-uri 'none'",
            "require-trusted-types-for 'script'",
            "trusted-types 'none'",
        )
    )


class PageServer:
    def __init__(self, host: str, port: int, edge_url: str) -> None:
        self.edge_url = edge_url
        self.origin = f"http://{host}:{port}"
        self.pixels: Counter[tuple[str, str]] = Counter()  # (publisher, ad_id) -> fires
        self._lock = threading.Lock()
        self._env = jinja2.Environment(loader=jinja2.FileSystemLoader(PAGES), autoescape=True)
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> PageServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def pixel_fires(self, publisher: str, ad_id: str) -> int:
        with self._lock:
            return self.pixels[(publisher, ad_id)]

    def wait_for_pixels(self, publisher: str, ad_id: str, expected: int) -> int:
        """Poll until the ad's pixel has fired ``expected`` times for the publisher's page
        (an image request races the impression beacon; neither waits for the other)."""
        return wait_until(
            lambda: self.pixel_fires(publisher, ad_id),
            lambda n: n == expected,
            lambda n: n > expected,
            f"{expected} pixel fire(s) of {ad_id} for {publisher}",
            10.0,
        )

    def url(self, page: str = "article", **knobs: object) -> str:
        query = "&".join(f"{k}={v}" for k, v in knobs.items())
        return f"{self.origin}/page/{page}?{query}"

    def _tag_manifest(self) -> dict:
        with urllib.request.urlopen(f"{self.edge_url}/dea/tag.json", timeout=5) as answer:
            return json.load(answer)

    def _render(self, name: str, knobs: dict[str, str]) -> tuple[bytes, dict[str, str]]:
        nonce = secrets.token_urlsafe(12)
        pinned = self._tag_manifest() if knobs.get("pin") else None
        body = self._env.get_template(f"{name}.html.j2").render(
            knobs=knobs, edge=self.edge_url, nonce=nonce, pinned=pinned
        )
        headers = {"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"}
        csp = csp_for(knobs.get("csp", ""), self.edge_url, nonce)
        if csp:
            headers["Content-Security-Policy"] = csp
        return body.encode(), headers

    def _count_pixel(self, ad_id: str, referer: str) -> None:
        pub = parse_qs(urlsplit(referer).query).get("pub", [""])[0]
        with self._lock:
            self.pixels[(pub, ad_id)] += 1

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                knobs = {k: v[0] for k, v in parse_qs(parts.query).items()}
                path = parts.path
                if path.startswith("/page/") and (PAGES / f"{path[6:]}.html.j2").is_file():
                    body, headers = server._render(path[6:], knobs)
                elif path.startswith("/static/") and (PAGES / "static" / path[8:]).is_file():
                    file = PAGES / "static" / path[8:]
                    body, headers = file.read_bytes(), {"Content-Type": STATIC_TYPES[file.suffix]}
                elif path.startswith("/px/"):
                    server._count_pixel(path[4:], self.headers.get("Referer", ""))
                    body, headers = GIF, {"Content-Type": "image/gif", "Cache-Control": "no-store"}
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: pytest shows failures, not every request

        return Handler
