-- $1 lock id, $2 name, $3 token, $4 ttl in ms, $5 meta.
-- A reader takes the name's advisory lock shared unless a live write intent
-- exists; CASE fixes the order (a WHERE's conditions may run in any order),
-- so a reader an intent refuses takes nothing. Fence and row only if taken.
WITH l AS MATERIALIZED (
	SELECT CASE
		WHEN EXISTS (SELECT 1 FROM distlock_pg_rw_intents WHERE name = $2 AND expires_at > clock_timestamp()) THEN false
		ELSE pg_try_advisory_lock_shared($1)
	END AS ok)
INSERT INTO distlock_pg_rw_holds (name, pid, lock_id, shared, token, fence, expires_at, meta)
SELECT $2, pg_backend_pid(), $1, true, $3, nextval('distlock_pg_fence'),
       clock_timestamp() + $4 * interval '1 millisecond', $5
FROM l WHERE l.ok
ON CONFLICT (name, pid) DO UPDATE SET
	lock_id = EXCLUDED.lock_id, shared = EXCLUDED.shared, token = EXCLUDED.token, fence = EXCLUDED.fence,
	expires_at = EXCLUDED.expires_at, meta = EXCLUDED.meta
RETURNING fence
