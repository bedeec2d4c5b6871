-- $1 key, $2 token, $3 ttl in microseconds, $4 owner, $5 metadata.
-- Inserts, or takes over the row of an expired lease; returns no row otherwise.
INSERT INTO distlock_leases (lock_key, token, fence, expires_at, owner, metadata)
VALUES ($1, $2, nextval('distlock_fence'), clock_timestamp() + $3 * interval '1 microsecond', $4, $5)
ON CONFLICT (lock_key) DO UPDATE SET
	token = EXCLUDED.token, fence = EXCLUDED.fence, expires_at = EXCLUDED.expires_at,
	owner = EXCLUDED.owner, metadata = EXCLUDED.metadata
WHERE distlock_leases.expires_at <= clock_timestamp()
RETURNING token, fence
