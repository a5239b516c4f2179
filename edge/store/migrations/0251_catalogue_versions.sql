-- Catalogue versions loaded with `edge catalogue load`: the newest is the live one, which
-- every node serves. Older versions stay, so what was served when can be told.
CREATE TABLE catalogue_versions (
    version      INTEGER PRIMARY KEY,
    content_hash TEXT NOT NULL,
    body         BLOB NOT NULL,
    loaded_at    REAL NOT NULL
) STRICT;
