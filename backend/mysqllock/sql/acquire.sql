-- name, key, token, ttl in microseconds, owner, business id, labels, name,
-- seconds to wait (0: try once). SQL that MySQL 8 and MariaDB both run: no
-- sequence, no RETURNING.
-- A WHERE without a table is evaluated once: the row is written, and the
-- fence drawn, only if GET_LOCK took the named lock, so the fence is taken
-- once the lock is held, by the session that holds it. The statement's
-- insert id (LAST_INSERT_ID) is the fence; no row changed means not taken.
-- The fence is the row's fence + 1, or the server's clock in microseconds
-- since 1970 when that is larger (always for a new row): so a key whose row
-- Cleanup deleted long ago starts again above every fence it had.
-- Time is the server's clock in UTC, whatever the session time zone.
INSERT INTO distlock_mysql_locks
	(lock_name, lock_key, fence, token, conn_id, since, expires_at, owner, business_id, labels)
SELECT ?, ?, LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))), ?,
	CONNECTION_ID(), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, ?, ?
FROM DUAL WHERE GET_LOCK(?, ?) = 1
ON DUPLICATE KEY UPDATE
	fence = LAST_INSERT_ID(GREATEST(fence + 1, VALUES(fence))),
	lock_key = VALUES(lock_key), token = VALUES(token), conn_id = VALUES(conn_id),
	since = VALUES(since), expires_at = VALUES(expires_at), owner = VALUES(owner),
	business_id = VALUES(business_id), labels = VALUES(labels)
