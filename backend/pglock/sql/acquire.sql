-- $1 lock id, $2 key, $3 token, $4 ttl in ms, $5 meta.
-- A WHERE without FROM is a one-time filter: the fence is taken and the row
-- written only if the advisory lock was taken.
INSERT INTO distlock_pg_locks (lock_key, lock_id, token, fence, pid, expires_at, meta)
SELECT $2, $1, $3, nextval('distlock_pg_fence'), pg_backend_pid(),
       clock_timestamp() + $4 * interval '1 millisecond', $5
WHERE pg_try_advisory_lock($1)
ON CONFLICT (lock_key) DO UPDATE SET
	lock_id = EXCLUDED.lock_id, token = EXCLUDED.token, fence = EXCLUDED.fence,
	pid = EXCLUDED.pid, expires_at = EXCLUDED.expires_at, meta = EXCLUDED.meta
RETURNING fence
