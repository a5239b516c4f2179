-- Report counters per UTC day ('YYYY-MM-DD'), beside the totals in counters: only ever
-- added to, in the same transaction as the totals. The edge decides which counters of
-- which scopes ('ad', 'campaign', 'publisher') get a day bucket.
CREATE TABLE daily_counters (
    day      TEXT NOT NULL,
    scope    TEXT NOT NULL,
    scope_id TEXT NOT NULL,
    counter  TEXT NOT NULL,
    amount   REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (day, scope, scope_id, counter)
) STRICT, WITHOUT ROWID;
