-- Clicks, conversions and what they bill (the same tables as the SQLite migration). A row
-- here is what a 2xx acknowledged; nothing is updated downward or deleted.
CREATE TABLE clicks (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    click_id       TEXT NOT NULL UNIQUE,
    impression_key TEXT NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('url', 'ugc', 'ai')),
    env            TEXT NOT NULL,
    ad_id          TEXT NOT NULL,
    campaign_id    TEXT,
    publisher_id   TEXT,
    slot_id        TEXT,
    invalid_reason TEXT,
    at             DOUBLE PRECISION NOT NULL
);
-- At most one valid click per impression, across every node.
CREATE UNIQUE INDEX clicks_valid_per_impression ON clicks (impression_key)
    WHERE invalid_reason IS NULL;
CREATE TABLE conversions (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    click_row      BIGINT NOT NULL UNIQUE REFERENCES clicks (id),
    ad_id          TEXT NOT NULL,
    campaign_id    TEXT,
    value_usd      DOUBLE PRECISION,
    at             DOUBLE PRECISION NOT NULL
);
CREATE TABLE charges (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pricing        TEXT NOT NULL CHECK (pricing IN ('cpc', 'cpa')),
    click_row      BIGINT REFERENCES clicks (id),
    conversion_row BIGINT REFERENCES conversions (id),
    campaign_id    TEXT,
    ad_id          TEXT NOT NULL,
    publisher_id   TEXT,
    amount_usd     DOUBLE PRECISION NOT NULL CHECK (amount_usd >= 0),
    at             DOUBLE PRECISION NOT NULL,
    UNIQUE (pricing, click_row)
);
CREATE INDEX charges_at ON charges (at, campaign_id);
