-- Invalid traffic: an impression the edge classified as invalid is stored (its dedupe keys
-- still make a replay a replay) with the reason, never billed, counted as invalid_<reason>.
ALTER TABLE impressions ADD COLUMN invalid_reason TEXT;
