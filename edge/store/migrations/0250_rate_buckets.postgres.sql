-- Shared rate-limit buckets: one GCRA row per key family and product, its theoretical
-- arrival time in epoch seconds. UNLOGGED: no WAL, so a bucket costs no fsync; a crash
-- of the database empties the table, which only forgives the requests of one window.
CREATE UNLOGGED TABLE rate_buckets (
    bucket TEXT PRIMARY KEY,
    tat    DOUBLE PRECISION NOT NULL
);
