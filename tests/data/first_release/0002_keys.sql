-- API keys. Only a SHA-256 of the key is kept; `lookup` is a prefix of that hash used to
-- find the row, and the full hash is compared in constant time afterwards.
CREATE TABLE api_keys (
    key_id      TEXT PRIMARY KEY,
    lookup      TEXT NOT NULL UNIQUE,
    key_hash    TEXT NOT NULL,
    env         TEXT NOT NULL CHECK (env IN ('production', 'sandbox')),
    product     TEXT NOT NULL CHECK (product IN ('ugc', 'ai', 'ad-manager')),
    name        TEXT NOT NULL DEFAULT '',
    created_at  REAL NOT NULL,
    expires_at  REAL,             -- set when the key became a rotation secondary
    revoked_at  REAL,
    replaced_by TEXT REFERENCES api_keys (key_id)
) STRICT;
