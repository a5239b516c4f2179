"""Run the app under uvicorn (uvloop + httptools), one environment per process."""

from __future__ import annotations

import logging

import uvicorn
from starlette.types import ASGIApp

from edge.app import create_app
from edge.settings import Settings


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def uvicorn_config(settings: Settings, app: ASGIApp | None = None) -> uvicorn.Config:
    return uvicorn.Config(
        app if app is not None else create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        # The geofence reads X-Forwarded-For itself, from EDGE_TRUSTED_PROXIES only;
        # uvicorn's own rewriting of the client address would bypass that rule.
        proxy_headers=False,
        server_header=False,
        access_log=settings.access_log,
        log_level=settings.log_level,
        timeout_graceful_shutdown=5,
    )


def serve(settings: Settings) -> None:
    configure_logging(settings.log_level)
    uvicorn.Server(uvicorn_config(settings)).run()
