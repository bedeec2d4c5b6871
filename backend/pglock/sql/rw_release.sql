-- $1 lock id, $2 name, $3 token. Runs on the pinned connection: deletes the
-- hold's row, unlocks in the row's mode and wakes the name's waiters (the
-- notice is sent at commit, after the unlock). No row, no unlock: the
-- caller then ends the session, which frees the hold.
WITH d AS (
	DELETE FROM distlock_pg_rw_holds WHERE name = $2 AND pid = pg_backend_pid() AND token = $3
	RETURNING shared)
SELECT CASE WHEN d.shared THEN pg_advisory_unlock_shared($1) ELSE pg_advisory_unlock($1) END
FROM d, (SELECT pg_notify('distlock_pg_rw', $2)) n
