-- $1 name, $2 intent. Removes the intent and the name's expired ones, and
-- wakes the name's waiters if the intent was live.
WITH d AS (
	DELETE FROM distlock_pg_rw_intents
	WHERE name = $1 AND (intent = $2 OR expires_at <= clock_timestamp())
	RETURNING intent, expires_at)
SELECT pg_notify('distlock_pg_rw', $1)
WHERE EXISTS (SELECT 1 FROM d WHERE intent = $2 AND expires_at > clock_timestamp())
