-- Every tag version this edge has built, with its bytes and SRI hash, so a page that pinned
-- one (tag.<version>.js with integrity=) keeps working after an upgrade, for the retention
-- time the edge decides (EDGE_TAG_RETENTION_DAYS).
CREATE TABLE tag_versions (
    version   TEXT PRIMARY KEY,
    body      BYTEA NOT NULL,
    integrity TEXT NOT NULL,
    built_at  DOUBLE PRECISION NOT NULL
);
