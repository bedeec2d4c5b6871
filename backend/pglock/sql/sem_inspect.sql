-- $1 name, $2 slot key. The stored limit, and the holds whose session holds
-- their slots, one row each with its number of slots, by fence (a row of
-- NULLs if none is held). A hold's rows share its fence, lease and
-- metadata.
WITH p AS (
	SELECT r.fence, (array_agg(r.meta))[1] AS meta, count(*) AS permits,
		(extract(epoch FROM max(r.expires_at) - clock_timestamp()) * 1000000)::bigint AS ttl_us
	FROM distlock_pg_permits r
	JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.pid = r.pid
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid = $2::integer::oid AND l.objid = r.slot::oid
	WHERE r.name = $1
	GROUP BY r.fence
)
SELECT COALESCE((SELECT permits FROM distlock_pg_semaphores WHERE name = $1), 0), p.fence, p.meta, p.ttl_us, p.permits
FROM (SELECT 1) one LEFT JOIN p ON true
ORDER BY p.fence
