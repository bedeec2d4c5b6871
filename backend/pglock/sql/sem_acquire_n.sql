-- $1 name, $2 the caller's limit, $3 the name's slot key, $4 token, $5 ttl in
-- ms, $6 meta, $7 permits (at least 1), $8 intent ('' for none), $9 intent
-- ttl in ms.
-- A hold of $7 permits, or of one for a request with an intent (a request
-- for one permit without an intent takes sem_acquire.sql, which checks the
-- intents alone). It is $7 slots i < limit: the advisory locks ($3, i),
-- tried in turn, the first free ones taken (LIMIT stops the scan there); if
-- fewer were free, those taken are unlocked again in the same statement, so
-- the session holds all or none. A name with no stored limit gets $2; a name
-- whose stored limit differs takes nothing. Nothing is tried while a live
-- intent was recorded before $8 (any live intent, if $8 is ''): requests
-- are served in the order they began waiting. After a lowering (slots >
-- permits) permits may be held in slots at or above the limit: attempts
-- then serialise on ($3, -1) for the statement and count every held slot in
-- pg_locks, which is exact at once, and the first that finds no permit held
-- above the limit marks the lowering over. Refused with an intent, it
-- records it (after every live one if new) or refreshes it, unless it was
-- withdrawn (expires_at '-infinity', see sem_withdraw.sql: this attempt
-- outlived its wait); granted, it removes it and wakes the name's waiters
-- (the next in line may fit now). Either way lapsed intents of the name
-- go, but not withdrawn marks, which Cleanup removes (and never the row the
-- upsert touches: a statement may change a row once). Returns the stored limit
-- (NULL if another first use inserted it meanwhile), the fence if the hold
-- was taken, the live intents ahead, the slots found free, and a count that
-- only makes the unlocks and the notice run.
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
ahead AS MATERIALIZED (
	SELECT count(*) AS n FROM distlock_pg_permit_intents i
	WHERE i.name = $1 AND i.intent <> $8 AND i.expires_at > clock_timestamp()
	  AND NOT EXISTS (SELECT 1 FROM distlock_pg_permit_intents m
		WHERE m.name = $1 AND m.intent = $8 AND m.expires_at > clock_timestamp() AND m.seq < i.seq)),
room AS MATERIALIZED (
	SELECT CASE
		WHEN (SELECT permits FROM s) IS DISTINCT FROM $2 THEN false
		WHEN (SELECT n FROM ahead) > 0 THEN false
		WHEN (SELECT slots FROM s) <= $2 THEN true
		ELSE CASE WHEN (SELECT true FROM (SELECT pg_advisory_xact_lock($3, -1)) x)
			THEN (SELECT count(*) FROM held) + $7 <= $2 END
	END AS ok),
got AS MATERIALIZED (
	SELECT g.i AS slot FROM generate_series(0, CASE WHEN (SELECT ok FROM room) THEN $2 - 1 ELSE -1 END) g(i)
	WHERE pg_try_advisory_lock($3, g.i)
	LIMIT $7),
granted AS MATERIALIZED (
	SELECT count(*) = $7 AS ok FROM got),
back AS MATERIALIZED (
	SELECT pg_advisory_unlock($3, got.slot) FROM got WHERE NOT (SELECT ok FROM granted)),
f AS MATERIALIZED (
	SELECT nextval('distlock_pg_fence') AS fence, clock_timestamp() + $5 * interval '1 millisecond' AS expires_at
	WHERE (SELECT ok FROM granted)),
h AS (
	INSERT INTO distlock_pg_permits (name, slot, pid, token, fence, expires_at, meta)
	SELECT $1, got.slot, pg_backend_pid(), $4, f.fence, f.expires_at, $6
	FROM got, f
	ON CONFLICT (name, slot) DO UPDATE SET
		pid = EXCLUDED.pid, token = EXCLUDED.token, fence = EXCLUDED.fence,
		expires_at = EXCLUDED.expires_at, meta = EXCLUDED.meta
	RETURNING fence),
rec AS (
	INSERT INTO distlock_pg_permit_intents AS t (name, intent, expires_at)
	SELECT $1, $8, clock_timestamp() + $9 * interval '1 millisecond'
	WHERE $8 <> '' AND (SELECT permits FROM s) = $2 AND NOT (SELECT ok FROM granted)
	ON CONFLICT (name, intent) DO UPDATE SET
		seq = CASE WHEN t.expires_at > clock_timestamp() THEN t.seq ELSE EXCLUDED.seq END,
		expires_at = EXCLUDED.expires_at
	WHERE t.expires_at <> '-infinity'),
gone AS (
	DELETE FROM distlock_pg_permit_intents
	WHERE name = $1 AND CASE
		WHEN (SELECT ok FROM granted) THEN intent = $8 OR (expires_at <= clock_timestamp() AND expires_at <> '-infinity')
		ELSE intent <> $8 AND expires_at <= clock_timestamp() AND expires_at <> '-infinity'
	END
	RETURNING intent, expires_at),
wake AS MATERIALIZED (
	SELECT pg_notify('distlock_pg_sem', $1)
	WHERE EXISTS (SELECT 1 FROM gone WHERE intent = $8 AND expires_at > clock_timestamp())),
over AS (
	UPDATE distlock_pg_semaphores SET slots = permits
	WHERE name = $1 AND CASE WHEN slots > permits AND (SELECT ok FROM room)
		THEN NOT EXISTS (SELECT 1 FROM held WHERE held.slot >= $2) ELSE false END)
SELECT (SELECT permits FROM s), (SELECT max(fence) FROM h), (SELECT n FROM ahead), (SELECT count(*) FROM got),
	(SELECT count(*) FROM back) + (SELECT count(*) FROM wake)
