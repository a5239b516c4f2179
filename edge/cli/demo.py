"""``edge demo`` (what ``make run`` starts): the edge on localhost with demo keys printed.

The keys are printed as ``export NAME=KEY`` lines and kept in ``demo.env`` beside the
database (``var/demo.env`` by default), so ``. var/demo.env`` sets the variables the README's
examples use. A restart reuses the keys in that file while they are still valid, so a shell
that sourced it keeps working; the demo keys it does not reuse are revoked.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

from edge.cli._common import Subcommands, settings_from, with_context
from edge.cli.serve import SERVE_EXITS
from edge.context import Context
from edge.errors import Unauthorized
from edge.preflight import check_files
from edge.routes.tag import DEMO_PUBLISHER
from edge.server import serve
from edge.settings import Settings, add_arguments
from edge.store import KeyRecord
from tag.demo import PAGE_PATH as DEMO_PATH

DEMO_NAME = "demo (make run)"
ENV_FILE = "demo.env"
# The variable each product's key goes in, per environment (the README's names).
KEY_VARIABLES = {
    "production": {"ugc": "UGC_KEY", "ai": "AI_KEY", "ad-manager": "AM_KEY"},
    # The sandbox has no AI product.
    "sandbox": {"ugc": "SANDBOX_UGC_KEY", "ad-manager": "SANDBOX_AM_KEY"},
}
_EXPORT = re.compile(r"^export ([A-Z_]+)=(\S+)$")


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "demo",
        help="serve production mode on localhost with demo keys (what `make run` does)",
        description="Print demo keys (one per product) as export lines, keep them in "
        "demo.env beside the database (reused on the next start while valid) and serve. "
        "Loopback and private addresses pass the geofence.",
        epilog=SERVE_EXITS,
    )
    add_arguments(p)
    p.set_defaults(func=run)


def env_file(settings: Settings) -> Path:
    # Beside a SQLite file; with a database server, in the working folder's var/.
    db = settings.db
    return (db.parent if isinstance(db, Path) else Path("var")) / ENV_FILE


def read_env_file(path: Path) -> dict[str, str]:
    """``NAME: value`` of the file's ``export NAME=value`` lines (missing file: none)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    return {m[1]: shlex.split(m[2])[0] for line in lines if (m := _EXPORT.match(line.strip()))}


def write_env_file(path: Path, values: dict[str, str]) -> None:
    """Merge ``values`` into the file (other environments' lines stay), readable by its
    owner only: it holds live keys."""
    merged = {**read_env_file(path), **values}
    text = "# Demo keys written by `edge demo`; `. var/demo.env` sets them in a shell.\n"
    text += "".join(f"export {name}={shlex.quote(value)}\n" for name, value in merged.items())
    path.parent.mkdir(parents=True, exist_ok=True)  # var/ beside no SQLite file (a URL)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    path.chmod(0o600)


async def _demo_keys(ctx: Context, kept: dict[str, str]) -> dict[str, str]:
    """The database claimed for this environment (refused, before any key is written, when it
    serves the other one), then variable -> key: the kept ones still valid, fresh ones for
    the rest; every other demo key of this environment is revoked."""
    await ctx.claim_environment()
    env = ctx.settings.env
    keys: dict[str, str] = {}
    reused: set[str] = set()
    for product, variable in KEY_VARIABLES[env].items():
        old = kept.get(variable)
        record = await _still_active(ctx, old, product) if old else None
        if old and record is not None:
            keys[variable] = old
        else:
            keys[variable], record = await ctx.keyring.issue(env, product, DEMO_NAME)
        reused.add(record.key_id)
    for record in await ctx.store.list_keys():
        mine = record.name == DEMO_NAME and record.env == env
        if mine and record.revoked_at is None and record.key_id not in reused:
            await ctx.store.revoke_key(record.key_id, ctx.clock())
    # The demo page's tag calls /dea as this publisher; /dea serves registered ones only.
    await ctx.store.upsert_publisher(DEMO_PUBLISHER, _demo_origins(ctx.settings), ctx.clock())
    return keys


async def _still_active(ctx: Context, key: str, product: str) -> KeyRecord | None:
    """The record of a demo key that is still the active key of ``product`` here, else None."""
    try:
        record = await ctx.keyring.verify(key, env=ctx.settings.env, product=product)
    except Unauthorized:
        return None
    if record.name != DEMO_NAME or record.status(ctx.clock()) != "active":
        return None
    return record


def _demo_origins(settings: Settings) -> list[str]:
    """The demo page's origin, under both loopback names a browser may be pointed at."""
    parts = urlsplit(settings.base_url)
    origins = [f"{parts.scheme}://{parts.netloc}"]
    if parts.hostname in ("127.0.0.1", "localhost") and parts.port is not None:
        origins += [f"{parts.scheme}://{h}:{parts.port}" for h in ("127.0.0.1", "localhost")]
    return list(dict.fromkeys(origins))


def try_commands(settings: Settings, keys: dict[str, str]) -> list[str]:
    """Commands that work as printed against this demo (tested)."""
    base = settings.base_url
    ugc = keys[KEY_VARIABLES[settings.env]["ugc"]]
    if settings.is_production:
        body = '{"post_id": "p1", "message": "my pup will not touch his kibble"}'
    else:  # "explain" is the sandbox's: why this answer
        body = '{"post_id": "p1", "message": "my pup will not touch his kibble", "explain": true}'
    return [
        f"curl -s {base}/v1/ugc/health",
        f"curl -s -X POST {base}/v1/ugc/process -H 'X-API-Key: {ugc}' "
        f"-H 'Content-Type: application/json' -d '{body}'",
    ]


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.allow_private_ips is None:
        settings = dataclasses.replace(settings, allow_private_ips=True)
    check_files(settings)  # before the keys: a start that cannot succeed revokes nothing
    path = env_file(settings)
    keys = with_context(settings, lambda ctx: _demo_keys(ctx, read_env_file(path)))
    write_env_file(path, keys)
    base = settings.base_url
    print(f"\nContextual ad edge ({settings.env}) on {base}\n")
    if settings.is_production:
        print(
            f"  demo page:  {base}{DEMO_PATH}  (publisher {DEMO_PUBLISHER!r}: open it in a browser)"
        )
        print(f"  the tag:    {base}/dea/tag.js  (version and integrity: {base}/dea/tag.json)\n")
    reports_key = KEY_VARIABLES[settings.env]["ad-manager"]
    print(f"  reports:    {base}/reports  (sign in with the ${reports_key} key below)\n")
    print(f"  keys (kept in {path} for the next start; `. {path}` sets them in a shell):")
    for variable, key in keys.items():
        print(f"    export {variable}={key}")
    first, *rest = try_commands(settings, keys)
    print(f"\n  try: {first}")
    for command in rest:
        print(f"       {command}")
    print(flush=True)
    serve(settings, demo=True)
    return 0
