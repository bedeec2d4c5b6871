-- $1 lock id, $2 key. Held comes from pg_locks; the row describes the holder
-- only if its session (pid) is the one holding the lock. holder_pid names
-- the holding session (0 if none), for a hold whose row is not written yet.
WITH h AS (
	SELECT pid FROM pg_locks
	WHERE locktype = 'advisory' AND granted AND objsubid = 1
	  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	  AND classid = (($1::bigint >> 32) & 4294967295)::oid
	  AND objid = ($1::bigint & 4294967295)::oid
)
SELECT EXISTS (SELECT 1 FROM h) AS held,
       COALESCE((SELECT pid FROM h LIMIT 1), 0) AS holder_pid,
       COALESCE(m.pid IN (SELECT pid FROM h), false) AS current,
       COALESCE(m.fence, 0) AS fence,
       COALESCE(m.meta, '{}'::jsonb) AS meta,
       COALESCE((extract(epoch FROM m.expires_at - clock_timestamp()) * 1000000)::bigint, 0) AS ttl_us
FROM (SELECT $2::text AS k) q LEFT JOIN distlock_pg_locks m ON m.lock_key = q.k
