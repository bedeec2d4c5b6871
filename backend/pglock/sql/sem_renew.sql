-- $1 name, $2 token, $3 ttl in ms. The row's time to live, for Inspect.
UPDATE distlock_pg_permits SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
WHERE name = $1 AND token = $2
