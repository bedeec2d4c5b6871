-- $1 lock id, $2 name. The rows whose session holds the name's advisory lock
-- in the row's mode, by fence, and the count of live intents on every row
-- (a row of NULLs if nothing is held).
WITH h AS (
	SELECT r.shared, r.fence, r.meta,
	       (extract(epoch FROM r.expires_at - clock_timestamp()) * 1000000)::bigint AS ttl_us
	FROM distlock_pg_rw_holds r
	JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid = r.pid
		AND l.mode = CASE WHEN r.shared THEN 'ShareLock' ELSE 'ExclusiveLock' END
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid = (($1::bigint >> 32) & 4294967295)::oid
		AND l.objid = ($1::bigint & 4294967295)::oid
	WHERE r.name = $2
)
SELECT h.shared, h.fence, h.meta, h.ttl_us,
       (SELECT count(*) FROM distlock_pg_rw_intents WHERE name = $2 AND expires_at > clock_timestamp()) AS intents
FROM (SELECT 1) one LEFT JOIN h ON true
ORDER BY h.fence
