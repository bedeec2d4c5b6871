-- $1 name, $2 the caller's limit, $3 the name's slot key, $4 token, $5 ttl in
-- ms, $6 meta.
-- One permit for a request without an intent (sem_acquire_n.sql takes the
-- others). A permit is slot i < limit: the advisory lock ($3, i), tried in
-- turn, the first free one taken (LIMIT 1 stops the scan there). Nothing is
-- tried while a request for permits waits (a live intent of the name). A name
-- with no stored limit gets $2; a name whose stored limit differs takes
-- nothing. After a lowering (slots > permits) permits may be held in slots at
-- or above the limit: attempts then serialise on ($3, -1) for the statement
-- and count every held slot in pg_locks, which is exact at once, and the
-- first that finds no permit held above the limit marks the lowering over.
-- Returns the stored limit (NULL if another first use inserted it meanwhile),
-- the fence if a permit was taken, and whether a request waits.
WITH cur AS MATERIALIZED (
	SELECT permits, slots FROM distlock_pg_semaphores WHERE name = $1),
ins AS (
	INSERT INTO distlock_pg_semaphores (name, permits, slots)
	SELECT $1, $2, $2 WHERE NOT EXISTS (SELECT 1 FROM cur)
	ON CONFLICT (name) DO NOTHING
	RETURNING permits, slots),
s AS MATERIALIZED (
	SELECT permits, slots FROM cur UNION ALL SELECT permits, slots FROM ins),
held AS MATERIALIZED (
	SELECT l.objid::bigint AS slot FROM pg_locks l
	WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
	  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	  AND l.classid = $3::integer::oid
	  AND l.objid::bigint < (SELECT slots FROM s)),
waiting AS MATERIALIZED (
	SELECT EXISTS (SELECT 1 FROM distlock_pg_permit_intents
		WHERE name = $1 AND expires_at > clock_timestamp()) AS yes),
room AS MATERIALIZED (
	SELECT CASE
		WHEN (SELECT permits FROM s) IS DISTINCT FROM $2 THEN false
		WHEN (SELECT yes FROM waiting) THEN false
		WHEN (SELECT slots FROM s) <= $2 THEN true
		ELSE CASE WHEN (SELECT true FROM (SELECT pg_advisory_xact_lock($3, -1)) x)
			THEN (SELECT count(*) FROM held) < $2 END
	END AS ok),
got AS MATERIALIZED (
	SELECT g.i AS slot FROM generate_series(0, $2 - 1) g(i)
	WHERE CASE WHEN (SELECT ok FROM room) THEN pg_try_advisory_lock($3, g.i) ELSE false END
	LIMIT 1),
h AS (
	INSERT INTO distlock_pg_permits (name, slot, pid, token, fence, expires_at, meta)
	SELECT $1, got.slot, pg_backend_pid(), $4, nextval('distlock_pg_fence'),
	       clock_timestamp() + $5 * interval '1 millisecond', $6
	FROM got
	ON CONFLICT (name, slot) DO UPDATE SET
		pid = EXCLUDED.pid, token = EXCLUDED.token, fence = EXCLUDED.fence,
		expires_at = EXCLUDED.expires_at, meta = EXCLUDED.meta
	RETURNING slot, fence),
over AS (
	UPDATE distlock_pg_semaphores SET slots = permits
	WHERE name = $1 AND CASE WHEN slots > permits AND (SELECT ok FROM room)
		THEN NOT EXISTS (SELECT 1 FROM held WHERE held.slot >= $2) ELSE false END)
SELECT (SELECT permits FROM s), (SELECT fence FROM h), (SELECT yes FROM waiting)
