-- $1 key, $2 token, $3 ttl in ms. Runs on the pinned connection: its success
-- proves the session, and so the advisory lock, is alive.
UPDATE distlock_pg_locks SET expires_at = clock_timestamp() + $3 * interval '1 millisecond'
WHERE lock_key = $1 AND token = $2
