"""Every long-lived object of one edge process, in one place.

``Context.build`` makes the objects that need no I/O (the CLI stops there); ``start`` loads
the ones that do (the signing key, the matcher, the geo database) and starts the background
tasks, in that order; ``stop`` undoes it in reverse. Routes, middleware and commands receive
the context and read its fields; nothing else keeps process-wide state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from edge import matching
from edge.admission import ModelAdmission
from edge.clients import ClientCache
from edge.counters import Counters
from edge.delivery.limits import TagLimits
from edge.delivery.page_cache import PageMatchCache
from edge.delivery.publishers import PublisherRegistry
from edge.estimates import EstimatesRefresher
from edge.housekeeping import Housekeeping
from edge.ivt import TrafficClassifier
from edge.keys import Keyring
from edge.live_catalogue import LiveCatalogue
from edge.matching import StateWrites, ThreadTurns
from edge.partner.idempotency import ReplayCache
from edge.partner.listing import Listing
from edge.preflight import newer_schema_error
from edge.ratelimit import RateLimits
from edge.settings import Settings, SettingsError
from edge.signing import Signer
from edge.spend import SpendLedger
from edge.store import NewerSchema, Store, open_store
from edge.tag_versions import TagVersions
from geoip import GeoDatabaseError, GeoReader, open_reader
from matcher import Matcher
from matcher.embeddings import MiniLM
from tag import TagBuild, build_stylesheet, build_tag

Clock = Callable[[], float]
# The meta entry that names the environment a database serves (see claim_environment).
ENVIRONMENT_META = "environment"
log = logging.getLogger("edge.context")
PAGE_CACHE_ENTRIES = 10_000


def _other_environment(held: str, what: str) -> str:
    other = "sandbox" if held == "production" else "production"
    return (
        f"EDGE_DB (--db): this database serves the {held} environment; {what} needs a "
        f"database of its own (e.g. --db var/{other}.db)"
    )


@dataclass(eq=False)
class Context:
    settings: Settings
    store: Store
    clock: Clock
    keyring: Keyring
    counters: Counters  # report counters, flushed by a background task
    rate_limits: RateLimits  # per key and product (partner routes)
    publishers: PublisherRegistry  # registered publishers, refreshed by a background task
    spend: SpendLedger  # billed USD per campaign: the pacing gate's and billing's input
    estimates: EstimatesRefresher  # keeps the matcher's click-through estimates fresh
    state_writes: StateWrites  # the matcher's post-decision writes in flight
    thread_turns: ThreadTurns  # matches of one conversation take turns (frequency cap)
    match_replays: ReplayCache  # recent UGC and AI match answers: a retry is answered once
    housekeeping: Housekeeping  # prunes expired matcher state, a background task
    traffic: TrafficClassifier  # invalid traffic: bots, client binding, per-client rates
    clients: ClientCache  # per client address: the address, geofence verdict, keyed hashes
    tag_limits: TagLimits  # the tag routes' per-client and per-publisher request limits
    page_cache: PageMatchCache  # recent page matches, shared by a page's visitors
    admission: ModelAdmission  # the tag lane's share of the model
    live_catalogue: LiveCatalogue  # follows the store's live catalogue, SIGHUP reloads
    tag: TagBuild  # the browser tag, built for this edge's public URL
    tag_versions: TagVersions  # this and earlier builds, for pages that pinned one
    tag_debug: TagBuild  # the same tag logging each decision (/dea/tag.debug.js)
    tag_css: TagBuild  # the optional default stylesheet (/dea/tag.css)
    # Loaded by ``start`` (they need I/O), never per request:
    signer: Signer | None = None
    matcher: Matcher | None = None
    geo: GeoReader | None = None
    # The Ad Manager's listing of the loaded catalogue, built on first use.
    ad_listing: Listing | None = None
    # Whether ``start`` loaded the matcher (a test may hand in a shared one to keep).
    matcher_owned: bool = False
    # The embedding model when loaded before the process forked (``edge serve --workers``).
    model: MiniLM | None = None

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        matcher: Matcher | None = None,
        model: MiniLM | None = None,
    ) -> Context:
        """``matcher``: an already loaded one (tests share one instead of reloading the model);
        ``model``: the embedding model, loaded already, for the matcher that ``start`` loads."""
        store = store if store is not None else open_store(settings)
        clock = clock or time.time
        tag = build_tag(settings.base_url)
        ctx = cls(
            settings=settings,
            store=store,
            clock=clock,
            keyring=Keyring(store, clock, settings.key_cache_seconds),
            counters=Counters(),
            rate_limits=RateLimits.from_settings(settings, clock, store),
            publishers=PublisherRegistry(store),
            spend=SpendLedger(clock),
            estimates=EstimatesRefresher(settings.estimates_refresh_seconds),
            state_writes=StateWrites(),
            thread_turns=ThreadTurns(),
            match_replays=ReplayCache(),
            housekeeping=Housekeeping(),
            traffic=TrafficClassifier(settings, clock),
            clients=ClientCache(settings.trusted_proxies, signer=lambda: ctx.signer),
            tag_limits=TagLimits(settings, clock),
            page_cache=PageMatchCache(settings.page_cache_seconds, PAGE_CACHE_ENTRIES, clock),
            admission=ModelAdmission(settings.tag_match_slots),
            live_catalogue=LiveCatalogue(),
            tag=tag,
            tag_versions=TagVersions(tag, settings.tag_retention_days),
            tag_debug=build_tag(settings.base_url, debug=True),
            tag_css=build_stylesheet(),
            matcher=matcher,
            model=model,
        )
        return ctx

    async def open_store(self) -> None:
        """Open the store. A database a newer release migrated is a ``SettingsError``: this
        release cannot know what those migrations changed, so it neither serves from it nor
        reads it (a rollback runs the newer release again, or restores a backup)."""
        try:
            await self.store.open()
        except NewerSchema as exc:
            raise newer_schema_error(exc) from None

    async def start(self) -> None:
        """Open the store and load what needs I/O; on failure, stop what had started."""
        await self.open_store()
        try:
            await self.claim_environment()
            if self.signer is None:
                self.signer = await Signer.from_settings(self.settings, self.store)
            if self.matcher is None:
                self.live_catalogue.note_file(self.settings.catalogue)
                self.matcher = await matching.load_matcher(self.settings, self.model)
                self.matcher_owned = True
                # The sandbox never explores: a partner's test gets the same answer each time.
                explore = self.settings.explore and self.settings.is_production
                self.matcher.config = replace(
                    self.matcher.config,
                    explore=explore,
                    batch_texts=self.settings.match_batch,
                )
            if isinstance(self.matcher, Matcher):  # a test's stand-in has no estimates
                await self._start_estimates(self.matcher)
            await self.live_catalogue.sync_at_start(self)  # one loaded into the store wins
            await self.tag_versions.record(self.store, self.clock())
            if self.geo is None:
                # Opened once (mmap, C extension); lookups take microseconds on the event loop.
                try:
                    self.geo = open_reader(self.settings.geoip_db)
                except GeoDatabaseError as exc:  # name the setting, as every bad value does
                    raise SettingsError(f"EDGE_GEOIP_DB (--geoip-db): {exc}") from None
            await self.publishers.start()
            await self.spend.start(self.store)  # before serving: billing needs what was spent
            self.counters.start(self.store)
            self.housekeeping.start(self)
            self.live_catalogue.start(self)
            self.store.on_change(self.changed)
        except BaseException:
            await self.stop()
            raise

    async def claim_environment(self) -> None:
        """A database serves one environment: the first edge to start on it records which,
        and an edge of the other one is refused (exit 2). On one database a sandbox's
        test traffic would count in production's counters and reports (they are kept per
        ad, campaign and publisher, not per environment), and a sandbox key would sign in
        to production's /reports figures."""
        env = self.settings.env
        held = (await self.store.put_meta_if_absent(ENVIRONMENT_META, env.encode())).decode()
        if held != env:
            raise SettingsError(_other_environment(held, f"a {env} edge"))

    async def refuse_other_environment(self, env: str, what: str) -> None:
        """SettingsError when the database already serves the other environment (``what``
        would belong to ``env``); records nothing, so a command that only stores (a key)
        does not decide which environment a new database serves."""
        held = await self.store.get_meta(ENVIRONMENT_META)
        if held is not None and held.decode() != env:
            raise SettingsError(_other_environment(held.decode(), what))

    async def _start_estimates(self, matcher: Matcher) -> None:
        # Before serving: a restart ranks with what was learned, not with bare priors.
        try:
            await self.estimates.refresh(self.store, matcher, self.clock())
        except Exception as exc:  # serve on the priors; the background refresh retries
            log.warning("click-through estimates not loaded at start-up: %s", exc)
        self.estimates.start(self.store, lambda: self.matcher, self.clock)

    def changed(self, topic: str, _payload: str) -> None:
        """Another node (or command) changed shared state: drop or reload our copy of it.
        ``"*"``: announcements may have been missed, so everything is refreshed."""
        if topic in ("keys", "*"):
            self.keyring.forget()
        if topic in ("publishers", "*"):
            self.publishers.refresh_soon()
        if topic in ("catalogue", "*"):
            self.live_catalogue.sync_soon(self)

    async def stop(self) -> None:
        """Flush and release everything ``start`` began, the store last."""
        try:
            await self.housekeeping.stop()
            await self.spend.stop()
            await self.live_catalogue.stop()
            await self.estimates.stop()
            await self.counters.stop(self.store)
            await self.publishers.stop()
            geo, self.geo = self.geo, None
            if geo is not None:
                geo.close()
            # Nothing queued is dropped on a clean stop: the store closes after this.
            await self.state_writes.drain()
            # A matcher handed in by a test is shared with other apps: only close our own.
            if self.matcher_owned and self.matcher is not None:
                self.matcher.close()
                self.matcher, self.matcher_owned = None, False
        finally:
            await self.store.close()
