-- Named secrets and small facts the service keeps (e.g. the signing key when none is set).
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value BLOB NOT NULL
) STRICT;
