-- name, name. IS_USED_LOCK is the session holding the lock (NULL if free);
-- the row describes the hold only if that session wrote it.
SELECT h.holder IS NOT NULL, COALESCE(m.conn_id = h.holder, FALSE),
	COALESCE(m.fence, 0), COALESCE(m.owner, ''), COALESCE(m.business_id, ''), COALESCE(m.labels, ''),
	COALESCE(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), m.expires_at), 0), COALESCE(h.holder, 0)
FROM (SELECT IS_USED_LOCK(?) AS holder) h
LEFT JOIN distlock_mysql_locks m ON m.lock_name = ?
