-- $1 lock id, $2 key, $3 token, $4 fence, $5 ttl in ms, $6 meta. Runs on the
-- pinned connection, whose session holds the lock: the row of a hold that
-- lasted the watch delay. A row of a later grant is never overwritten.
INSERT INTO distlock_pg_locks (lock_key, lock_id, token, fence, pid, expires_at, meta)
VALUES ($2, $1, $3, $4, pg_backend_pid(), clock_timestamp() + $5 * interval '1 millisecond', $6)
ON CONFLICT (lock_key) DO UPDATE SET
	lock_id = EXCLUDED.lock_id, token = EXCLUDED.token, fence = EXCLUDED.fence,
	pid = EXCLUDED.pid, expires_at = EXCLUDED.expires_at, meta = EXCLUDED.meta
WHERE distlock_pg_locks.fence < EXCLUDED.fence
