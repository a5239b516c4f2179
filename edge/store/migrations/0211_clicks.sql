-- Clicks, conversions and what they bill (edge/store/events.py). A row here is what a 2xx
-- acknowledged; nothing is updated downward or deleted.
CREATE TABLE clicks (
    id             INTEGER PRIMARY KEY,
    click_id       TEXT NOT NULL UNIQUE,  -- made by the tag (or the AI partner); a replay shares it
    impression_key TEXT NOT NULL,         -- the impression it belongs to: 'tok:<token id>', 'ai:<ad>:<message>'
    kind           TEXT NOT NULL CHECK (kind IN ('url', 'ugc', 'ai')),
    env            TEXT NOT NULL,
    ad_id          TEXT NOT NULL,
    campaign_id    TEXT,
    publisher_id   TEXT,
    slot_id        TEXT,
    invalid_reason TEXT,                  -- null: a valid click
    at             REAL NOT NULL
) STRICT;
-- At most one valid click per impression.
CREATE UNIQUE INDEX clicks_valid_per_impression ON clicks (impression_key)
    WHERE invalid_reason IS NULL;
CREATE TABLE conversions (
    id             INTEGER PRIMARY KEY,
    click_row      INTEGER NOT NULL UNIQUE REFERENCES clicks (id),  -- one per click
    ad_id          TEXT NOT NULL,
    campaign_id    TEXT,
    value_usd      REAL,
    at             REAL NOT NULL
) STRICT;
-- What a click (CPC) or a conversion (CPA) costs its campaign, one row each.
CREATE TABLE charges (
    id             INTEGER PRIMARY KEY,
    pricing        TEXT NOT NULL CHECK (pricing IN ('cpc', 'cpa')),
    click_row      INTEGER REFERENCES clicks (id),
    conversion_row INTEGER REFERENCES conversions (id),
    campaign_id    TEXT,
    ad_id          TEXT NOT NULL,
    publisher_id   TEXT,
    amount_usd     REAL NOT NULL CHECK (amount_usd >= 0),
    at             REAL NOT NULL,
    UNIQUE (pricing, click_row)
) STRICT;
CREATE INDEX charges_at ON charges (at, campaign_id);
