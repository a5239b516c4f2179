-- A click keeps the rotation family of the partner's key whose serve it came from (sealed
-- in the pixel's impression token or the AI click URL), so its conversion counts for that
-- partner's report row as the click did. NULL for a click on the tag's ads and in the rows
-- from before: their conversions count for no key, as they did. Portable: one file.
ALTER TABLE clicks ADD COLUMN key_family TEXT;
