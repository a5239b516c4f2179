"""The edge's one way into the matcher: loaded once at start-up, called with a deadline.

Both the partner routes (/v1) and the delivery routes (/dea) call ``match`` here, so they
share the one in-process matcher instance (DESIGN 1).
"""

from __future__ import annotations

from edge.context import Context


async def startup(ctx: Context) -> None:
    """Load the catalogue and the model into ``ctx.matcher`` (unless a test supplied one)."""
