-- What a billed impression bills is stored in the impression's own row (`billed_usd`, NULL
-- when it bills nothing) instead of a row of its own in `billing_events`: a billing row
-- repeated its impression's campaign, ad, publisher and time, and cost every billed
-- impression a second B-tree insert, its foreign-key lookup and the pages of that table in
-- each commit. One bill per impression is now the row's shape, not an index's guard.
--
-- Rows are kept: each billing row's amount moves into its impression, and `billing_events`
-- becomes a view with the same columns and rows, so whatever reads it reads the same.
ALTER TABLE impressions ADD COLUMN billed_usd REAL CHECK (billed_usd >= 0);
UPDATE impressions SET billed_usd = b.amount_usd
FROM billing_events AS b WHERE b.impression_id = impressions.id;
DROP TABLE billing_events;
CREATE VIEW billing_events (impression_id, campaign_id, ad_id, publisher_id, amount_usd, at) AS
SELECT id, campaign_id, ad_id, publisher_id, billed_usd, at
FROM impressions WHERE billed_usd IS NOT NULL;
