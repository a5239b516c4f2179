-- Catalogue versions loaded with `edge catalogue load`: the newest is the live one, which
-- every node serves. Older versions stay, so what was served when can be told.
CREATE TABLE catalogue_versions (
    version      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    content_hash TEXT NOT NULL,
    body         BYTEA NOT NULL,
    loaded_at    DOUBLE PRECISION NOT NULL
);
