-- $1 lock id, $2 key, $3 token. Runs on the pinned connection.
WITH d AS (DELETE FROM distlock_pg_locks WHERE lock_key = $2 AND token = $3)
SELECT pg_advisory_unlock($1)
