"""Run the app under uvicorn (uvloop + httptools), one environment per process, with the
connection limits of ``edge.protocol`` and an access log that never shows a key."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import ipaddress
import logging
import re
import resource
import secrets
import signal
import socket
import sys
from functools import partial
from urllib.parse import unquote

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edge.app import create_app
from edge.context import Context
from edge.matching import preload_model
from edge.preflight import check_files
from edge.protocol import guarded_protocol
from edge.settings import Settings, SettingsError
from edge.store.postgres import redact_url
from edge.workers import Supervisor, bind_socket
from matcher.embeddings import MiniLM, fix_mmap_threshold

log = logging.getLogger("edge.server")

_KEY = re.compile(r"(?:prod|sandbox)-(?:ugc|ai|ad-manager)-[A-Za-z0-9]{8,}(?:-[A-Za-z0-9]+)?")
_REDACTED_PARAMS = r"(?:api[_-]?key|x-api-key|key|apikey|token|t|sig)"
_SECRET_PARAM = re.compile(rf"(?i)([?&]{_REDACTED_PARAMS}=)[^&\s#]*")
# A segment of the path or query (between / ? & = # ;) with a percent-escape in it, and a
# query parameter whose name has one: the app reads them decoded, so they are judged so.
_ESCAPED = re.compile(r"[^/?&=#;\s]*%[0-9A-Fa-f]{2}[^/?&=#;\s]*")
_ESCAPED_PARAM = re.compile(r"([?&])([^=&#\s]*%[0-9A-Fa-f]{2}[^=&#\s]*)=[^&\s#]*")
_REDACTED_NAME = re.compile(rf"(?i){_REDACTED_PARAMS}")


def redact_path(path: str) -> str:
    """``path`` (with its query) without keys or signed values, percent-encoded or not."""
    if "%" in path:
        path = _ESCAPED_PARAM.sub(_redact_escaped_param, path)
        path = _ESCAPED.sub(_redact_escaped, path)
    return _SECRET_PARAM.sub(r"\1[redacted]", _KEY.sub("[key]", path))


def _decoded(text: str) -> str:
    """``text`` percent-decoded until it no longer changes (a key encoded twice is a key)."""
    for _ in range(4):
        plain = unquote(text)
        if plain == text:
            break
        text = plain
    return text


def _redact_escaped(match: re.Match[str]) -> str:
    # The whole raw segment goes: where the key lies in it is known only once decoded.
    return "[key]" if _KEY.search(_decoded(match[0])) else match[0]


def _redact_escaped_param(match: re.Match[str]) -> str:
    if _REDACTED_NAME.fullmatch(_decoded(match[2])):
        return f"{match[1]}{match[2]}=[redacted]"
    return match[0]


class AccessLogRedaction(logging.Filter):
    """uvicorn's access line is (client, method, path+query, version, status): the client
    becomes a keyed hash of its address (a key made per process: lines of one run can be
    told apart and grouped, no address can be read back), the path loses its secrets."""

    def __init__(self, key: bytes | None = None) -> None:
        super().__init__()
        self._key = key or secrets.token_bytes(32)

    def client_tag(self, client: str) -> str:
        host, sep, _port = client.rpartition(":")
        try:
            ip = ipaddress.ip_address(host.strip("[]") if sep else client)
        except ValueError:
            return "-"
        mac = hmac.new(self._key, ip.packed, hashlib.sha256).hexdigest()
        return f"client-{mac[:12]}"

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:
            client, method, path, version, status = args
            where = self.client_tag(str(client))
            record.args = (where, method, redact_path(str(path)), version, status)
        return True


def uvicorn_config(settings: Settings, app: ASGIApp | None = None) -> uvicorn.Config:
    return uvicorn.Config(
        app if app is not None else create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=guarded_protocol(settings),
        # The edge serves no WebSocket: an upgrade request is answered as plain HTTP by the
        # app (its 404, its redacting access log). Handed to uvicorn's WebSocket protocol, a
        # connection never came back to ours, so its per-address slot was never released,
        # and uvicorn logged the raw address and query of the handshake.
        ws="none",
        lifespan="on",
        # The geofence reads X-Forwarded-For itself, from EDGE_TRUSTED_PROXIES only;
        # uvicorn's own rewriting of the client address would bypass that rule.
        proxy_headers=False,
        server_header=False,
        access_log=settings.access_log,
        log_level=settings.log_level,
        timeout_graceful_shutdown=5,
        limit_concurrency=None,  # EDGE_MAX_CONNECTIONS is the protocol's (GuardedHttpToolsProtocol)
        timeout_keep_alive=settings.keep_alive_seconds,
    )


def _raise_open_files_limit(wanted: int) -> None:
    """Each connection is a file descriptor: let the soft limit reach what the settings allow
    (the hard limit permitting), so EDGE_MAX_CONNECTIONS answers 503 before accept() fails."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


class StartupErrors:
    """ASGI wrapper: a start-up that fails on a bad setting (``SettingsError``) is reported
    as the setting's one line by ``serve``, instead of uvicorn logging the traceback."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.error: SettingsError | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def quiet_send(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed":
                # Starlette sends this from inside its except block, so the exception being
                # handled is the one that failed the start-up.
                exc = sys.exc_info()[1]
                if isinstance(exc, SettingsError):
                    self.error = exc
                    message = {**message, "message": ""}
            await send(message)

        await self.app(scope, receive, quiet_send)


class EdgeServer(uvicorn.Server):
    """uvicorn's server that says "ready" only once it is listening (a busy port ends with
    the bind error instead)."""

    def __init__(self, config: uvicorn.Config, settings: Settings) -> None:
        super().__init__(config)
        self.settings = settings

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            s = self.settings
            log.info("edge %s environment ready on %s", s.env, s.base_url)


def serve(settings: Settings, *, demo: bool = False) -> None:
    """Check the file settings, then run until stopped. A bad setting raises
    ``SettingsError`` (one line naming it; the command line's exit 2), a port it cannot
    listen on included; a start that fails otherwise exits 1 (uvicorn's own status, 3, is
    not one the command line uses). ``demo``: ``edge demo``'s local edge, which is not
    warned about its signing key."""
    check_files(settings)
    sock = _listen(settings)  # before anything is logged or loaded: a refusal is one line
    configure_logging(settings.log_level)
    if settings.is_production and not settings.signing_key and not demo:
        log.warning(
            "EDGE_SIGNING_KEY is not set: the edge signs with a key it generated and keeps in "
            "the database, so anyone who can read the database or a backup of it can forge "
            "impression tokens, AI beacon URLs and /reports sessions. Set EDGE_SIGNING_KEY "
            "(docs/deploy.md)."
        )
    fix_mmap_threshold()  # before the model and catalogue load (workers inherit it)
    db = settings.db
    log.info("database %s", redact_url(db) if isinstance(db, str) else str(db.resolve()))
    _raise_open_files_limit(settings.max_connections + 256)  # + the store, model, logs
    # SIGHUP reloads the catalogue once the app is up (edge.live_catalogue); until then,
    # and without a catalogue file, it must not end the process.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if settings.workers > 1:
        log.info("%d workers on %s:%d", settings.workers, settings.host, settings.port)
        model = preload_model(settings)  # before the fork: the workers share its pages
        code = Supervisor(settings.workers, sock, partial(_worker, settings, model)).run()
        if code:
            raise SystemExit(_exit_status(code))
        return
    # One process: uvicorn binds the port itself once the app has started; this check only
    # refuses a port it cannot have before anything loads (as --workers does), in one line.
    sock.close()
    app = create_app(settings)
    guard = StartupErrors(app)
    # uvicorn_config configures uvicorn's loggers: the filter comes after.
    config = uvicorn_config(settings, app.serving(guard))
    logging.getLogger("uvicorn.access").addFilter(AccessLogRedaction())
    try:
        EdgeServer(config, settings).run()
    except SystemExit as exc:
        if guard.error is not None:
            raise guard.error from None
        raise SystemExit(_exit_status(exc.code)) from None


def _listen(settings: Settings) -> socket.socket:
    """The listening socket on EDGE_HOST:EDGE_PORT; one that cannot be had is a setting the
    edge cannot use (a busy port, an address not of this host: one line, exit 2), named by
    which of the two it is."""
    try:
        return bind_socket(settings.host, settings.port)
    except OSError as exc:
        host_fault = isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL
        name = "EDGE_HOST (--host)" if host_fault else "EDGE_PORT (--port)"
        raise SettingsError(
            f"{name}: cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}"
        ) from None


def _exit_status(code: object) -> int:
    """A failed start's exit status as the command line states them: 2 stays (a setting),
    anything else that is not 0 (uvicorn's 3, a worker's) is 1."""
    if code in (0, None):
        return 0
    return 2 if code == 2 else 1


def _worker(settings: Settings, model: MiniLM | None, index: int, sock: socket.socket) -> int:
    """One worker of ``--workers N``: the whole edge on the inherited socket (and model)."""
    app = create_app(settings, context=Context.build(settings, model=model))
    guard = StartupErrors(app)
    config = uvicorn_config(settings, app.serving(guard))
    logging.getLogger("uvicorn.access").addFilter(AccessLogRedaction())
    server = EdgeServer(config, settings)
    try:
        server.run(sockets=[sock])
    except SystemExit:
        if guard.error is None:
            raise
    if guard.error is not None:  # a bad setting: its one line, and the settings' status
        print(f"edge: {guard.error}", file=sys.stderr)
        return 2
    return 0 if server.started else 3  # uvicorn's own exit status for a failed start-up
