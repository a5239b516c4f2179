-- A click keeps the pricing model and bid its ad was served under (the SQLite migration
-- says why). Rows from before have NULL: their conversions are priced from the live
-- catalogue, as they were.
-- The checks are added NOT VALID: a CHECK added with its column is verified against every
-- existing row under the table's exclusive lock, blocking click writes for a scan of the
-- whole table, and every existing row holds NULL there, which passes both checks. New and
-- updated rows are checked as with any constraint.
ALTER TABLE clicks
    ADD COLUMN pricing_model TEXT,
    ADD COLUMN bid_usd DOUBLE PRECISION;
ALTER TABLE clicks
    ADD CONSTRAINT clicks_pricing_model_check
        CHECK (pricing_model IN ('cpc', 'cpm', 'cpa')) NOT VALID,
    ADD CONSTRAINT clicks_bid_usd_check CHECK (bid_usd >= 0) NOT VALID;
