"""What every route and command shares, built once per process from the settings."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edge.counters import Counters
from edge.keys import Keyring
from edge.settings import Settings
from edge.signing import Signer
from edge.store import Store, open_store

Clock = Callable[[], float]


@dataclass
class Context:
    settings: Settings
    store: Store
    clock: Clock
    keyring: Keyring
    # Filled during start-up (the app's lifespan), never per request.
    signer: Signer | None = None
    matcher: Any = None  # matcher.Matcher, loaded by edge.matching.startup
    geo: Any = None  # geoip reader, opened at start-up by the delivery edge
    counters: Counters = field(default_factory=Counters)
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        matcher: Any = None,
    ) -> Context:
        """``matcher``: an already loaded one (tests share one instead of reloading the model)."""
        store = store if store is not None else open_store(settings)
        clock = clock or time.time
        keyring = Keyring(store, clock, settings.key_cache_seconds)
        return cls(settings=settings, store=store, clock=clock, keyring=keyring, matcher=matcher)
