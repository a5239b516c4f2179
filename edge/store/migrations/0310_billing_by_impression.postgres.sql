-- A billing row is keyed by its impression (there is one per billed impression at most):
-- the row id's primary key and the unique index on impression_id were two indexes that
-- every billed impression wrote to; now one primary key on impression_id is both.
ALTER TABLE billing_events
    DROP COLUMN id,
    DROP CONSTRAINT billing_events_impression_id_key,
    ADD PRIMARY KEY (impression_id);
