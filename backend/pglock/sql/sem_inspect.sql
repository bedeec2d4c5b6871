-- $1 name, $2 slot key. The stored limit, and the permits whose session
-- holds their slot, by fence (a row of NULLs if none is held).
WITH p AS (
	SELECT r.fence, r.meta, (extract(epoch FROM r.expires_at - clock_timestamp()) * 1000000)::bigint AS ttl_us
	FROM distlock_pg_permits r
	JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.pid = r.pid
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid = $2::integer::oid AND l.objid = r.slot::oid
	WHERE r.name = $1
)
SELECT COALESCE((SELECT permits FROM distlock_pg_semaphores WHERE name = $1), 0), p.fence, p.meta, p.ttl_us
FROM (SELECT 1) one LEFT JOIN p ON true
ORDER BY p.fence
