-- Delivery events (the same tables as the SQLite migration). Impressions are billing-grade:
-- a row here is what a 2xx acknowledged; the primary key on impression_keys is what makes a
-- beacon count once across every node.
CREATE TABLE impressions (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('url', 'ugc', 'ai-render', 'ai-view', 'legacy')),
    env          TEXT NOT NULL,
    ad_id        TEXT NOT NULL,
    campaign_id  TEXT,
    publisher_id TEXT,
    post_id      TEXT,
    slot_id      TEXT,
    cpm_usd      DOUBLE PRECISION,
    at           DOUBLE PRECISION NOT NULL
);
CREATE TABLE impression_keys (
    dedupe_key    TEXT PRIMARY KEY,
    impression_id BIGINT NOT NULL REFERENCES impressions (id)
);
CREATE TABLE billing_events (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    impression_id BIGINT NOT NULL UNIQUE REFERENCES impressions (id),
    campaign_id   TEXT,
    ad_id         TEXT NOT NULL,
    publisher_id  TEXT,
    amount_usd    DOUBLE PRECISION NOT NULL CHECK (amount_usd >= 0),
    at            DOUBLE PRECISION NOT NULL
);
CREATE TABLE hovers (
    token_id     TEXT PRIMARY KEY,
    ad_id        TEXT NOT NULL,
    publisher_id TEXT,
    slot_id      TEXT,
    hover_ms     INTEGER NOT NULL,
    at           DOUBLE PRECISION NOT NULL
);
CREATE TABLE placement_failures (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    publisher_id TEXT NOT NULL,
    slot_id      TEXT NOT NULL,
    ad_id        TEXT,
    reason       TEXT NOT NULL,
    message      TEXT NOT NULL DEFAULT '',
    page_url     TEXT NOT NULL DEFAULT '',
    at           DOUBLE PRECISION NOT NULL
);
CREATE TABLE counters (
    scope    TEXT NOT NULL,
    scope_id TEXT NOT NULL,
    counter  TEXT NOT NULL,
    amount   DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, scope_id, counter)
);
CREATE TABLE publishers (
    publisher_id TEXT PRIMARY KEY,
    origins      TEXT NOT NULL,
    created_at   DOUBLE PRECISION NOT NULL,
    updated_at   DOUBLE PRECISION NOT NULL
);
