-- $1 retention in ms, $2 at most this many rows.
-- Deletes read-write lock hold rows whose lease ended more than $1 ago and whose
-- session no longer holds the name's advisory lock (it ended without a release).
DELETE FROM distlock_pg_rw_holds
WHERE (name, pid) IN (
	SELECT h.name, h.pid FROM distlock_pg_rw_holds h
	WHERE h.expires_at < clock_timestamp() - $1 * interval '1 millisecond'
	  AND NOT EXISTS (
		SELECT 1 FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid = h.pid
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid = ((h.lock_id >> 32) & 4294967295)::oid
		  AND l.objid = (h.lock_id & 4294967295)::oid)
	LIMIT $2 FOR UPDATE SKIP LOCKED)
