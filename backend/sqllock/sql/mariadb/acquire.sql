-- key, token, ttl in microseconds, owner, metadata (UTC_TIMESTAMP: the
-- database's clock, whatever the session time zone).
-- Inserts, or takes over the row of an expired lease. The assignments run left to
-- right on the updated row: token decides, the others follow it. RETURNING
-- gives the row as it is now; the token says who holds it.
INSERT INTO distlock_leases (lock_key, token, fence, expires_at, owner, metadata)
VALUES (?, ?, NEXTVAL(distlock_fence), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, ?)
ON DUPLICATE KEY UPDATE
	token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(token), token),
	fence = IF(token = VALUES(token), VALUES(fence), fence),
	expires_at = IF(token = VALUES(token), VALUES(expires_at), expires_at),
	owner = IF(token = VALUES(token), VALUES(owner), owner),
	metadata = IF(token = VALUES(token), VALUES(metadata), metadata)
RETURNING token, fence
