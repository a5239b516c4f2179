-- A click keeps the pricing model and bid its ad was served under (its ad set's when the
-- impression token or AI beacon URL was issued, sealed there), so its conversion bills CPA
-- only when the view was served as CPA, at that bid, whatever the live catalogue says by
-- then. Rows from before have NULL: their conversions are priced from the live catalogue,
-- as they were.
ALTER TABLE clicks ADD COLUMN pricing_model TEXT
    CHECK (pricing_model IN ('cpc', 'cpm', 'cpa'));
ALTER TABLE clicks ADD COLUMN bid_usd REAL CHECK (bid_usd >= 0);
