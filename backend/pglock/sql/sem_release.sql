-- $1 slot key, $2 name, $3 token, $4 fence. Runs on the pinned connection:
-- unlocks the slots the hold's rows name (written by this session's grant,
-- which no other grant of a slot can overwrite while it is held; the fence
-- leaves out rows a released earlier hold of the same token left) and
-- wakes the name's waiters (the notice is sent at commit, after the
-- unlocks). True only if every slot was unlocked. No row, no unlock: the
-- caller then ends the session, which frees the hold. The rows stay: the
-- next grant of a slot overwrites its row, and InspectPermits trusts a row
-- only while its session holds the slot.
SELECT bool_and(pg_advisory_unlock($1, r.slot))
FROM distlock_pg_permits r, (SELECT pg_notify('distlock_pg_sem', $2)) n
WHERE r.name = $2 AND r.token = $3 AND r.fence = $4 AND r.pid = pg_backend_pid()
HAVING count(*) > 0
