-- A click keeps the pricing model and bid its ad was served under (the SQLite migration
-- says why). Rows from before have NULL: their conversions are priced from the live
-- catalogue, as they were.
ALTER TABLE clicks
    ADD COLUMN pricing_model TEXT CHECK (pricing_model IN ('cpc', 'cpm', 'cpa')),
    ADD COLUMN bid_usd DOUBLE PRECISION CHECK (bid_usd >= 0);
