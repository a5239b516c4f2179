-- Old no-match windows and serves are pruned in bounded batches (edge.housekeeping); these
-- indexes keep each batch from scanning the whole table.
CREATE INDEX post_backoff_until ON post_backoff (until);
CREATE INDEX thread_serves_served_at ON thread_serves (served_at);
