-- Spend per campaign since an instant (today's spend, for daily caps) reads billing rows
-- by time.
CREATE INDEX billing_events_at ON billing_events (at, campaign_id);
