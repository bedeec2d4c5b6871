-- key, token, ttl in microseconds, owner, metadata (UTC_TIMESTAMP: the
-- database's clock, whatever the session time zone). SQL that MySQL 8 also
-- runs: no sequence, no RETURNING.
-- Inserts, or takes over the row of an expired or released lease. The
-- statement's insert id (LAST_INSERT_ID) is the new fence, or the largest BIGINT
-- if the key is held. It is 0 only if the statement did nothing: the fence
-- floor's row is missing, and no key can be granted until Migrate restores it.
-- A takeover draws the fence from the row itself (fence + 1), with the row
-- locked: after every earlier grant of the key. A new row (a key never locked,
-- or whose row cleanup deleted) gets the floor + 1, read under a shared lock
-- that cleanup's raise of the floor waits for, and cleanup deletes only rows
-- whose fence the floor covers. Release keeps the row, so a statement that
-- read the floor and was descheduled before inserting finds the row of any
-- grant made meanwhile and takes it over with that grant's fence + 1.
-- The assignments run left to right on the updated row: token decides, the
-- others follow it. A repeat by the token that holds the key (its lease not
-- yet over: expires_at is still the old one when fence is assigned) keeps
-- its fence and renews the lease.
INSERT INTO distlock_leases (lock_key, token, fence, expires_at, owner, metadata)
SELECT ?, ?, LAST_INSERT_ID(f.n + 1), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, ?
FROM distlock_fence_floor f WHERE f.id = 1
LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE
	token = IF(expires_at <= UTC_TIMESTAMP(6), VALUES(token), token),
	fence = IF(token = VALUES(token),
		IF(expires_at <= UTC_TIMESTAMP(6), LAST_INSERT_ID(fence + 1), LAST_INSERT_ID(fence)),
		fence + LAST_INSERT_ID(9223372036854775807) - 9223372036854775807),
	expires_at = IF(token = VALUES(token), VALUES(expires_at), expires_at),
	owner = IF(token = VALUES(token), VALUES(owner), owner),
	metadata = IF(token = VALUES(token), VALUES(metadata), metadata)
