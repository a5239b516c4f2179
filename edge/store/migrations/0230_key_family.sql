-- Key families: a key and every key that replaced it by rotation share one family id (the
-- first key's id). Rate limits and idempotency keys are per family, so rotating does not
-- multiply a partner's quota or replay an idempotent call as new.
ALTER TABLE api_keys ADD COLUMN family_id TEXT;

WITH RECURSIVE chain (key_id, family_id) AS (
    SELECT key_id, key_id FROM api_keys
    WHERE key_id NOT IN (SELECT replaced_by FROM api_keys WHERE replaced_by IS NOT NULL)
    UNION ALL
    SELECT k.replaced_by, chain.family_id
    FROM api_keys AS k JOIN chain ON k.key_id = chain.key_id
    WHERE k.replaced_by IS NOT NULL
)
UPDATE api_keys SET family_id = (SELECT family_id FROM chain WHERE chain.key_id = api_keys.key_id);
