-- $1 lock id, $2 name, $3 token, $4 ttl in ms, $5 meta, $6 intent ('' for
-- none), $7 intent ttl in ms.
-- A writer takes the name's advisory lock exclusively, whatever the intents.
-- Refused with an intent, it records or refreshes the intent, unless the
-- intent was withdrawn (expires_at '-infinity', see rw_withdraw.sql: this
-- attempt outlived its wait); granted, it removes its own. Either way
-- lapsed intents of the name go, but not withdrawn marks, which Cleanup
-- removes (and never the row the upsert touches: a statement may change a
-- row once).
WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock($1) AS ok),
i AS (
	INSERT INTO distlock_pg_rw_intents (name, intent, expires_at)
	SELECT $2, $6, clock_timestamp() + $7 * interval '1 millisecond'
	FROM l WHERE NOT l.ok AND $6 <> ''
	ON CONFLICT (name, intent) DO UPDATE SET expires_at = EXCLUDED.expires_at
	WHERE distlock_pg_rw_intents.expires_at <> '-infinity'),
d AS (
	DELETE FROM distlock_pg_rw_intents
	WHERE name = $2 AND CASE
		WHEN (SELECT ok FROM l) THEN intent = $6 OR (expires_at <= clock_timestamp() AND expires_at <> '-infinity')
		ELSE intent <> $6 AND expires_at <= clock_timestamp() AND expires_at <> '-infinity'
	END)
INSERT INTO distlock_pg_rw_holds (name, pid, lock_id, shared, token, fence, expires_at, meta)
SELECT $2, pg_backend_pid(), $1, false, $3, nextval('distlock_pg_fence'),
       clock_timestamp() + $4 * interval '1 millisecond', $5
FROM l WHERE l.ok
ON CONFLICT (name, pid) DO UPDATE SET
	lock_id = EXCLUDED.lock_id, shared = EXCLUDED.shared, token = EXCLUDED.token, fence = EXCLUDED.fence,
	expires_at = EXCLUDED.expires_at, meta = EXCLUDED.meta
RETURNING fence
