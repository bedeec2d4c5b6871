-- $1 retention in ms, $2 at most this many rows.
-- Deletes the intents of requests for permits that lapsed more than $1 ago.
DELETE FROM distlock_pg_permit_intents
WHERE (name, intent) IN (
	SELECT i.name, i.intent FROM distlock_pg_permit_intents i
	WHERE i.expires_at < clock_timestamp() - $1 * interval '1 millisecond'
	LIMIT $2 FOR UPDATE SKIP LOCKED)
