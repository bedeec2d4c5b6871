-- $1 retention in ms, $2 batch size. Deletes at most $2 rows whose lease ended
-- more than $1 ago and whose session no longer holds the lock.
DELETE FROM distlock_pg_locks
WHERE lock_key IN (
	SELECT m.lock_key FROM distlock_pg_locks m
	WHERE m.expires_at < clock_timestamp() - $1 * interval '1 millisecond'
	  AND NOT EXISTS (
		SELECT 1 FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid = m.pid
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid = ((m.lock_id >> 32) & 4294967295)::oid
		  AND l.objid = (m.lock_id & 4294967295)::oid)
	LIMIT $2 FOR UPDATE SKIP LOCKED)
AND expires_at < clock_timestamp() - $1 * interval '1 millisecond'
