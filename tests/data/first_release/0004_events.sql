-- Delivery events (edge/store/events.py). Impressions are billing-grade: a row here is what a
-- 2xx acknowledged. Nothing in these tables is ever updated downward or deleted.
CREATE TABLE impressions (
    id           INTEGER PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('url', 'ugc', 'ai-render', 'ai-view', 'legacy')),
    env          TEXT NOT NULL,
    ad_id        TEXT NOT NULL,
    campaign_id  TEXT,
    publisher_id TEXT,
    post_id      TEXT,
    slot_id      TEXT,
    cpm_usd      REAL,
    at           REAL NOT NULL
) STRICT;
-- Every dedupe key of a counted impression (token id, the tag's impression id, an AI
-- beacon's (kind, ad, message)): a beacon sharing any one of them is a replay.
CREATE TABLE impression_keys (
    dedupe_key    TEXT PRIMARY KEY,
    impression_id INTEGER NOT NULL REFERENCES impressions (id)
) STRICT, WITHOUT ROWID;
-- What a production CPM impression costs its campaign (cpm_usd / 1000), one row each.
CREATE TABLE billing_events (
    id            INTEGER PRIMARY KEY,
    impression_id INTEGER NOT NULL UNIQUE REFERENCES impressions (id),
    campaign_id   TEXT,
    ad_id         TEXT NOT NULL,
    publisher_id  TEXT,
    amount_usd    REAL NOT NULL CHECK (amount_usd >= 0),
    at            REAL NOT NULL
) STRICT;
-- Hover engagement: once per impression token.
CREATE TABLE hovers (
    token_id     TEXT PRIMARY KEY,
    ad_id        TEXT NOT NULL,
    publisher_id TEXT,
    slot_id      TEXT,
    hover_ms     INTEGER NOT NULL,
    at           REAL NOT NULL
) STRICT;
-- Placements the tag could not render.
CREATE TABLE placement_failures (
    id           INTEGER PRIMARY KEY,
    publisher_id TEXT NOT NULL,
    slot_id      TEXT NOT NULL,
    ad_id        TEXT,
    reason       TEXT NOT NULL,
    message      TEXT NOT NULL DEFAULT '',
    page_url     TEXT NOT NULL DEFAULT '',
    at           REAL NOT NULL
) STRICT;
-- Report counters: only ever added to (never reset). scope is 'ad', 'publisher', 'campaign'
-- or 'key'; billable amounts are counters too ('billable_usd').
CREATE TABLE counters (
    scope    TEXT NOT NULL,
    scope_id TEXT NOT NULL,
    counter  TEXT NOT NULL,
    amount   REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, scope_id, counter)
) STRICT, WITHOUT ROWID;
-- Publishers whose pages may embed the tag; their origins are the CORS allow-list.
CREATE TABLE publishers (
    publisher_id TEXT PRIMARY KEY,
    origins      TEXT NOT NULL,  -- JSON array of normalised origins
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL
) STRICT;
