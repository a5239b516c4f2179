-- A click id is unique within its impression, not across every click: the AI product's
-- click id is the partner's and unsigned, so one signed click URL fired with ids another
-- partner would use made that partner's genuine clicks (another ad, message or
-- conversation) silent replays. `UNIQUE (click_id, impression_key)` is the replay guard
-- now (a resent click has both), and, click id first, the index a conversion's lookup by
-- click id reads. SQLite cannot drop a column's UNIQUE in place: the table is rebuilt with
-- its rows and ids as they are, so conversions and charges that refer to them stay valid
-- (migrations run with foreign keys off and are checked before their commit).
CREATE TABLE clicks_0370 (
    id             INTEGER PRIMARY KEY,
    click_id       TEXT NOT NULL,         -- made by the tag (or the AI partner); a replay shares it
    impression_key TEXT NOT NULL,         -- the impression it belongs to: 'tok:<token id>', 'ai...'
    kind           TEXT NOT NULL CHECK (kind IN ('url', 'ugc', 'ai')),
    env            TEXT NOT NULL,
    ad_id          TEXT NOT NULL,
    campaign_id    TEXT,
    publisher_id   TEXT,
    slot_id        TEXT,
    invalid_reason TEXT,                  -- null: a valid click
    at             REAL NOT NULL,
    UNIQUE (click_id, impression_key)
) STRICT;
INSERT INTO clicks_0370 (id, click_id, impression_key, kind, env, ad_id, campaign_id,
                         publisher_id, slot_id, invalid_reason, at)
    SELECT id, click_id, impression_key, kind, env, ad_id, campaign_id, publisher_id,
           slot_id, invalid_reason, at
    FROM clicks ORDER BY id;
DROP TABLE clicks;
ALTER TABLE clicks_0370 RENAME TO clicks;
-- At most one valid click per impression (dropped with the old table).
CREATE UNIQUE INDEX clicks_valid_per_impression ON clicks (impression_key)
    WHERE invalid_reason IS NULL;
