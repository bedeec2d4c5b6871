-- $1 retention in microseconds, $2 batch size. Deletes at most $2 rows that
-- expired more than $1 ago, skipping rows another session is using.
DELETE FROM distlock_leases
WHERE lock_key IN (
	SELECT lock_key FROM distlock_leases
	WHERE expires_at < clock_timestamp() - $1 * interval '1 microsecond'
	LIMIT $2 FOR UPDATE SKIP LOCKED)
AND expires_at < clock_timestamp() - $1 * interval '1 microsecond'
