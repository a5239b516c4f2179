-- Today's spend per campaign (daily caps) is read from the campaigns' `billable_usd` day
-- buckets, which every billing commit bumps in its own transaction; the billing rows and
-- charges are no longer read by time, so their time indexes go (one B-tree fewer written
-- per billed impression). Rows are kept.
--
-- The buckets of the day this runs are first made whole from the rows: a database whose
-- day buckets began today (upgraded past 0260 in the same start-up) has today's earlier
-- billing only in the rows. A bucket never goes down.
INSERT INTO daily_counters (day, scope, scope_id, counter, amount)
SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD'), 'campaign', campaign_id,
       'billable_usd', sum(amount_usd)
FROM (
    SELECT campaign_id, amount_usd, at FROM billing_events
    UNION ALL SELECT campaign_id, amount_usd, at FROM charges
) AS spent
WHERE campaign_id IS NOT NULL
  AND at >= extract(epoch FROM date_trunc('day', now() AT TIME ZONE 'UTC'))
GROUP BY campaign_id
ON CONFLICT (day, scope, scope_id, counter)
DO UPDATE SET amount = GREATEST(daily_counters.amount, excluded.amount);
DROP INDEX billing_events_at;
DROP INDEX charges_at;
