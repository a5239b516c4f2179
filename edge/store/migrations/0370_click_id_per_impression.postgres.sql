-- A click id is unique within its impression, not across every click (the SQLite migration
-- says why): `UNIQUE (click_id, impression_key)` replaces `UNIQUE (click_id)`, click id
-- first so a conversion's lookup by click id reads it too. Rows are kept as they are.
ALTER TABLE clicks
    DROP CONSTRAINT clicks_click_id_key,
    ADD CONSTRAINT clicks_click_id_impression_key_key UNIQUE (click_id, impression_key);
