-- A billing row is keyed by its impression (there is one per billed impression at most):
-- the table's own row id and the unique index on impression_id were two B-trees that every
-- billed impression wrote to; now the primary key is both. Rows are kept as they are.
CREATE TABLE billing_events_by_impression (
    impression_id INTEGER PRIMARY KEY REFERENCES impressions (id),
    campaign_id   TEXT,
    ad_id         TEXT NOT NULL,
    publisher_id  TEXT,
    amount_usd    REAL NOT NULL CHECK (amount_usd >= 0),
    at            REAL NOT NULL
) STRICT;
INSERT INTO billing_events_by_impression (impression_id, campaign_id, ad_id, publisher_id,
                                          amount_usd, at)
    SELECT impression_id, campaign_id, ad_id, publisher_id, amount_usd, at
    FROM billing_events ORDER BY impression_id;
DROP TABLE billing_events;
ALTER TABLE billing_events_by_impression RENAME TO billing_events;
CREATE INDEX billing_events_at ON billing_events (at, campaign_id);
