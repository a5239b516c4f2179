-- Matcher state. Thread-scoped disables: the ad is never shown in that thread
-- (UGC: the post) again. Idempotent by the primary key; the first meta_data is kept.
CREATE TABLE thread_disables (
    thread_id  TEXT NOT NULL,
    ad_id      TEXT NOT NULL,
    meta       TEXT,             -- the caller's meta_data object as JSON, for analytics
    created_at REAL NOT NULL,
    PRIMARY KEY (thread_id, ad_id)
) STRICT, WITHOUT ROWID;

-- Which units (posts, AI turns) of a thread were served which ad: the frequency cap counts
-- distinct units, so refreshing one post after its ttl_seconds never uses the cap up.
CREATE TABLE thread_serves (
    thread_id TEXT NOT NULL,
    ad_id     TEXT NOT NULL,
    unit_id   TEXT NOT NULL,
    served_at REAL NOT NULL,
    PRIMARY KEY (thread_id, ad_id, unit_id)
) STRICT, WITHOUT ROWID;

-- The no-match window of a post: not matched again before `until`.
CREATE TABLE post_backoff (
    post_id    TEXT PRIMARY KEY,
    misses     INTEGER NOT NULL,
    until      REAL NOT NULL,
    demand     TEXT NOT NULL,
    reason     TEXT NOT NULL,
    updated_at REAL NOT NULL
) STRICT, WITHOUT ROWID;
