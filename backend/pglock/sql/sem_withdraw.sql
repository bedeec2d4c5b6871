-- $1 name, $2 intent. Removes the intent of a request for permits and the
-- name's lapsed ones, and wakes the name's waiters if the intent was live.
WITH d AS (
	DELETE FROM distlock_pg_permit_intents
	WHERE name = $1 AND (intent = $2 OR expires_at <= clock_timestamp())
	RETURNING intent, expires_at)
SELECT pg_notify('distlock_pg_sem', $1)
WHERE EXISTS (SELECT 1 FROM d WHERE intent = $2 AND expires_at > clock_timestamp())
