-- $1 slot key, $2 name, $3 token. Runs on the pinned connection: unlocks the
-- slot its row names (written by this session's grant, which no other grant
-- of the slot can overwrite while it is held) and wakes the name's waiters
-- (the notice is sent at commit, after the unlock). No row, no unlock: the
-- caller then ends the session, which frees the permit. The row stays: the
-- next grant of the slot overwrites it, and InspectPermits trusts it only
-- while its session holds the slot.
SELECT pg_advisory_unlock($1, r.slot)
FROM distlock_pg_permits r, (SELECT pg_notify('distlock_pg_sem', $2)) n
WHERE r.name = $2 AND r.token = $3 AND r.pid = pg_backend_pid()
