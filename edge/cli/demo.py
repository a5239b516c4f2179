"""``edge demo`` (what ``make run`` starts): the edge on localhost with demo keys printed."""

from __future__ import annotations

import argparse
import dataclasses
from urllib.parse import urlsplit

from edge.cli._common import Subcommands, settings_from, with_context
from edge.context import Context
from edge.keys import PRODUCTS
from edge.preflight import check_files
from edge.routes.tag import DEMO_PUBLISHER
from edge.server import serve
from edge.settings import Settings, add_arguments
from tag.demo import PAGE_PATH as DEMO_PATH

DEMO_NAME = "demo (make run)"


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "demo",
        help="serve production mode on localhost with demo keys (what `make run` does)",
        description="Issue fresh demo keys (revoking the last run's), print them and serve. "
        "Loopback and private addresses pass the geofence.",
    )
    add_arguments(p)
    p.set_defaults(func=run)


async def _fresh_keys(ctx: Context) -> dict[str, str]:
    for record in await ctx.store.list_keys():
        if record.name == DEMO_NAME and record.revoked_at is None:
            await ctx.store.revoke_key(record.key_id, ctx.clock())
    keys = {}
    for product in PRODUCTS:
        keys[product], _ = await ctx.keyring.issue(ctx.settings.env, product, DEMO_NAME)
    # The demo page's tag calls /dea as this publisher; /dea serves registered ones only.
    await ctx.store.upsert_publisher(DEMO_PUBLISHER, _demo_origins(ctx.settings), ctx.clock())
    return keys


def _demo_origins(settings: Settings) -> list[str]:
    """The demo page's origin, under both loopback names a browser may be pointed at."""
    parts = urlsplit(settings.base_url)
    origins = [f"{parts.scheme}://{parts.netloc}"]
    if parts.hostname in ("127.0.0.1", "localhost") and parts.port is not None:
        origins += [f"{parts.scheme}://{h}:{parts.port}" for h in ("127.0.0.1", "localhost")]
    return list(dict.fromkeys(origins))


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.allow_private_ips is None:
        settings = dataclasses.replace(settings, allow_private_ips=True)
    check_files(settings)  # before the keys: a start that cannot succeed revokes nothing
    keys = with_context(settings, _fresh_keys)
    base = settings.base_url
    print(f"\nContextual ad edge ({settings.env}) on {base}\n")
    print(f"  demo page:  {base}{DEMO_PATH}  (publisher {DEMO_PUBLISHER!r}: open it in a browser)")
    print(f"  the tag:    {base}/dea/tag.js  (pinned version and integrity: {base}/dea/tag.json)\n")
    for product, key in keys.items():
        print(f"  {product:<11} key: {key}")
    print(
        f"\n  try: curl -s {base}/v1/ugc/health\n"
        f"       curl -s -X POST {base}/v1/ugc/process -H 'X-API-Key: {keys['ugc']}' \\\n"
        "            -H 'Content-Type: application/json' \\\n"
        '            -d \'{"post_id": "p1", "message": "my pup will not touch his kibble"}\'\n',
        flush=True,
    )
    serve(settings)
    return 0
