-- Matcher state: thread-scoped disables, served units per thread, no-match windows.
CREATE TABLE thread_disables (
    thread_id  TEXT NOT NULL,
    ad_id      TEXT NOT NULL,
    meta       TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (thread_id, ad_id)
);

CREATE TABLE thread_serves (
    thread_id TEXT NOT NULL,
    ad_id     TEXT NOT NULL,
    unit_id   TEXT NOT NULL,
    served_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (thread_id, ad_id, unit_id)
);

CREATE TABLE post_backoff (
    post_id    TEXT PRIMARY KEY,
    misses     INTEGER NOT NULL,
    until      DOUBLE PRECISION NOT NULL,
    demand     TEXT NOT NULL,
    reason     TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);
