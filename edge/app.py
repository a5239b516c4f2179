"""The ASGI application: routes of every module, the middleware stack, start-up and shutdown."""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import RedirectResponse
from starlette.routing import BaseRoute, Match, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from edge.context import Context
from edge.errors import exception_handlers
from edge.lane import BeaconLane
from edge.middleware import CORSMiddleware, GeofenceMiddleware, SecurityHeadersMiddleware
from edge.middleware.geofence import Geofence
from edge.middleware.headers import HeaderRules
from edge.routes import (
    RouteModule,
    ad_manager,
    ai,
    conversions,
    dea,
    health,
    impressions,
    legacy,
    meta,
    reports,
    sandbox,
    tag,
    ugc,
)
from edge.settings import Settings
from edge.store import Store

log = logging.getLogger("edge.app")
TAG_SCRIPT_PREFIX = "/dea/tag."  # /dea/tag.js and the versioned /dea/tag.<version>.js


# Every route family, each with `routes(ctx)` and `openapi(ctx)`.
ROUTE_MODULES: tuple[RouteModule, ...] = (
    health,
    ugc,
    ai,
    ad_manager,
    impressions,
    conversions,
    sandbox,
    legacy,
    dea,
    tag,
    reports,
)


def build_routes(ctx: Context) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    for module in ROUTE_MODULES:
        routes.extend(module.routes(ctx))
    routes.extend(meta.routes(ctx, ROUTE_MODULES))
    return routes


def build_fence(ctx: Context) -> Geofence | None:
    """The production geofence (None in the sandbox: it has no US-only rule)."""
    if not ctx.settings.is_production:
        return None
    # Open: liveness checks for load balancers, the API document, every path under
    # /dea/tag. (the script, its pinned and debug builds, the stylesheet, the manifest: not
    # API calls or beacons; CDNs cache them for everyone) and whatever the tag module
    # declares public (its demo page and the page's files). README and docs/dea-api.md list
    # them.
    return Geofence(
        geo=lambda: ctx.geo,
        trusted_proxies=ctx.settings.trusted_proxies,
        allow_private=ctx.settings.allow_private_ips,
        open_paths={*health.openapi(ctx)["paths"], meta.PATH, *tag.PUBLIC_PATHS},
        open_prefixes=(TAG_SCRIPT_PREFIX,),
        clients=ctx.clients,
    )


HEADER_RULES = HeaderRules(timing_paths=dea.TIMING_PATHS, timing_prefixes=(TAG_SCRIPT_PREFIX,))


def build_middleware(ctx: Context, fence: Geofence | None) -> list[Middleware]:
    """The stack, outermost first.

    Headers outermost, so every answer (CORS refusals, geofence 403s) carries them; CORS
    before the geofence, so preflights are answered without a geo decision and a 403 from
    the geofence still carries the CORS grant the tag needs to read it; the geofence only
    in production (the sandbox has no US-only rule).
    """
    stack = [
        Middleware(SecurityHeadersMiddleware, rules=HEADER_RULES),
        Middleware(
            CORSMiddleware,
            registered_origin=ctx.publishers.registered_origin,
            preflight_paths=dea.PREFLIGHT_PATHS,
            explained_paths=frozenset({dea.KEYWORDS, dea.PLACEMENTS}),
        ),
    ]
    if fence is not None:
        stack.append(Middleware(GeofenceMiddleware, fence=fence))
    return stack


class EdgeApp(Starlette):
    """Starlette with the beacon lane (``edge.lane``) in front of its whole stack."""

    def __init__(self, *, lane: Callable[[ASGIApp], BeaconLane], **kwargs: Any) -> None:
        self._make_lane = lane
        self.lane: BeaconLane | None = None  # built with the stack, on the first call
        super().__init__(**kwargs)

    def build_middleware_stack(self) -> ASGIApp:
        self.lane = self._make_lane(super().build_middleware_stack())
        return self.lane

    def serving(self, outer: ASGIApp) -> ASGIApp:
        """What a server runs: the beacon lane outermost for the requests it answers, so a
        beacon skips the wrapper coroutines in front of it (``outer``'s and Starlette's
        ``__call__``); everything else, lifespan included, goes to ``outer`` (this app, or
        a wrapper of it) and answers as before."""
        if self.middleware_stack is None:
            self.middleware_stack = self.build_middleware_stack()
        assert self.lane is not None  # made with the stack
        return self.lane.in_front_of(outer)


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    clock: Callable[[], float] | None = None,
    context: Context | None = None,
) -> EdgeApp:
    """The edge for one environment. Tests pass a ``context`` (or store/clock) to share state."""
    ctx = context or Context.build(settings, store=store, clock=clock)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await ctx.start()
        frozen = False
        try:
            # Everything loaded so far (model, gazetteer, catalogue, tables: ~260k tracked
            # objects) lives as long as the process; left in the collector's generations,
            # every full collection walks it, a ~200 ms stall of the event loop under load
            # (the ingest p99). Frozen, a full collection sees only objects made since.
            # https://docs.python.org/3/library/gc.html#gc.freeze
            gc.freeze()
            frozen = True
            yield
        finally:
            if frozen:
                gc.unfreeze()  # tests start many apps in one process: give them back
            await ctx.stop()

    fence = build_fence(ctx)

    def lane(stack: ASGIApp) -> BeaconLane:
        return BeaconLane(
            stack,
            endpoints=dea.lane_endpoints(ctx),
            direct=dea.lane_direct(ctx),
            headers=HEADER_RULES,
            registered_origin=ctx.publishers.registered_origin,
            fence=fence,
        )

    app = EdgeApp(
        lane=lane,
        routes=build_routes(ctx),
        middleware=build_middleware(ctx, fence),
        exception_handlers=exception_handlers(),
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False  # Starlette's redirect names the client's Host
    app.router.default = _slash_redirect(app.router)
    app.state.ctx = ctx
    return app


def _slash_redirect(router: Router) -> ASGIApp:
    """A 307 to the path with (or without) its trailing slash when that is a route, else 404.

    The Location is relative (the path and query only): Starlette's own redirect builds it
    from the request's Host header, which lets any client make the edge point elsewhere.
    """
    not_found = router.not_found

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path != "/":
            other = path.rstrip("/") if path.endswith("/") else path + "/"
            probe = {**scope, "path": other}
            if other and any(r.matches(probe)[0] is not Match.NONE for r in router.routes):
                location = "/" + quote(other, safe="/:@!$&'()*+,;=-._~").lstrip("/")
                if scope.get("query_string"):
                    location += "?" + scope["query_string"].decode("latin-1")
                await RedirectResponse(location, status_code=307)(scope, receive, send)
                return
        await not_found(scope, receive, send)

    return app
