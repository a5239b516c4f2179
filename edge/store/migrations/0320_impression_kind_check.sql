-- The check on an impression's kind as equalities instead of `kind IN (...)`: SQLite builds
-- a small temporary index for an IN list each time a statement runs, and an executemany
-- runs its statement once per row, so the IN check cost about 2 of the ~5 us an impression
-- row takes to insert; the equalities accept exactly the same kinds and cost next to
-- nothing. SQLite cannot change a check in place: the table is rebuilt with its rows and
-- ids as they are, so the dedupe keys and billing rows that refer to them stay valid
-- (migrations run with foreign keys off and are checked before their commit).
CREATE TABLE impressions_0320 (
    id             INTEGER PRIMARY KEY,
    kind           TEXT NOT NULL CHECK (kind = 'url' OR kind = 'ugc' OR kind = 'ai-render'
                                        OR kind = 'ai-view' OR kind = 'legacy'),
    env            TEXT NOT NULL,
    ad_id          TEXT NOT NULL,
    campaign_id    TEXT,
    publisher_id   TEXT,
    post_id        TEXT,
    slot_id        TEXT,
    cpm_usd        REAL,
    at             REAL NOT NULL,
    invalid_reason TEXT
) STRICT;
INSERT INTO impressions_0320 (id, kind, env, ad_id, campaign_id, publisher_id, post_id,
                              slot_id, cpm_usd, at, invalid_reason)
    SELECT id, kind, env, ad_id, campaign_id, publisher_id, post_id, slot_id, cpm_usd, at,
           invalid_reason
    FROM impressions ORDER BY id;
DROP TABLE impressions;
ALTER TABLE impressions_0320 RENAME TO impressions;
