-- $1 retention in ms, $2 at most this many rows.
-- Deletes permit rows whose lease ended more than $1 ago and whose session is
-- gone (it ended without a release).
DELETE FROM distlock_pg_permits
WHERE (name, slot) IN (
	SELECT p.name, p.slot FROM distlock_pg_permits p
	WHERE p.expires_at < clock_timestamp() - $1 * interval '1 millisecond'
	  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = p.pid)
	LIMIT $2 FOR UPDATE SKIP LOCKED)
