-- Matcher state (DESIGN 4.3). Thread-scoped disables: the ad is never shown in that thread
-- (UGC: the post) again. Idempotent by the primary key; the first meta_data is kept.
CREATE TABLE thread_disables (
    thread_id  TEXT NOT NULL,
    ad_id      TEXT NOT NULL,
    meta       TEXT,             -- the caller's meta_data object as JSON, for analytics
    created_at REAL NOT NULL,
    PRIMARY KEY (thread_id, ad_id)
) STRICT, WITHOUT ROWID;

-- How often an ad was served in a thread within the current frequency window.
CREATE TABLE thread_serves (
    thread_id    TEXT NOT NULL,
    ad_id        TEXT NOT NULL,
    serves       INTEGER NOT NULL,
    window_start REAL NOT NULL,
    last_at      REAL NOT NULL,
    PRIMARY KEY (thread_id, ad_id)
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
