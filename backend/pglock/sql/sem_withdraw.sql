-- $1 name, $2 intent. Marks the intent of a request for permits withdrawn
-- (expires_at '-infinity'), removes the name's lapsed ones, and wakes the
-- name's waiters if the intent was live. The mark stays until Cleanup: an
-- attempt of the withdrawn request that reaches the server after this
-- statement (it was on its way on another session when the wait ended)
-- finds it and does not record the intent again (sem_acquire_n.sql).
WITH was AS (
	SELECT expires_at FROM distlock_pg_permit_intents WHERE name = $1 AND intent = $2),
d AS (
	DELETE FROM distlock_pg_permit_intents
	WHERE name = $1 AND intent <> $2 AND expires_at <= clock_timestamp() AND expires_at <> '-infinity'),
w AS (
	INSERT INTO distlock_pg_permit_intents (name, intent, expires_at) VALUES ($1, $2, '-infinity')
	ON CONFLICT (name, intent) DO UPDATE SET expires_at = EXCLUDED.expires_at)
SELECT pg_notify('distlock_pg_sem', $1)
WHERE EXISTS (SELECT 1 FROM was WHERE expires_at > clock_timestamp())
