"""The ASGI application: routes of every module, the middleware stack, start-up and shutdown."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from edge import counters, matching
from edge.context import Context
from edge.errors import exception_handlers
from edge.routes import ad_manager, ai, dea, health, legacy, meta, sandbox, tag, ugc
from edge.settings import Settings
from edge.signing import Signer
from edge.store import Store

log = logging.getLogger("edge.app")


# Every route family, each `routes(ctx)` and optionally `openapi(ctx)`.
ROUTE_MODULES = (health, ugc, ai, ad_manager, sandbox, legacy, dea, tag)
# Modules with `async startup(ctx)` / `async shutdown(ctx)`, started in this order and
# stopped in reverse (route modules may define them too).
LIFECYCLE_MODULES = (matching, *ROUTE_MODULES, counters)


def build_routes(ctx: Context) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    for module in ROUTE_MODULES:
        routes.extend(module.routes(ctx))
    routes.extend(meta.routes(ctx, ROUTE_MODULES))
    return routes


def build_middleware(ctx: Context) -> list[Middleware]:
    """The stack, outermost first."""
    return []


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    clock=None,
    context: Context | None = None,
) -> Starlette:
    """The edge for one environment. Tests pass a ``context`` (or store/clock) to share state."""
    ctx = context or Context.build(settings, store=store, clock=clock)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await ctx.store.open()
        if ctx.signer is None:
            ctx.signer = await Signer.from_settings(settings, ctx.store)
        started = []
        try:
            for module in LIFECYCLE_MODULES:
                if hasattr(module, "startup"):
                    await module.startup(ctx)
                started.append(module)
            log.info("edge %s environment ready on %s", settings.env, settings.base_url)
            yield
        finally:
            for module in reversed(started):
                if hasattr(module, "shutdown"):
                    await module.shutdown(ctx)
            await ctx.store.close()

    app = Starlette(
        routes=build_routes(ctx),
        middleware=build_middleware(ctx),
        exception_handlers=exception_handlers(),
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    return app
