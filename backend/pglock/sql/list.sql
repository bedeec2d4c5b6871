-- $1 key prefix. The rows whose session holds their advisory lock.
SELECT m.lock_key, m.fence, m.meta,
       (extract(epoch FROM m.expires_at - clock_timestamp()) * 1000000)::bigint AS ttl_us
FROM distlock_pg_locks m
JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid = m.pid
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND l.classid = ((m.lock_id >> 32) & 4294967295)::oid
	AND l.objid = (m.lock_id & 4294967295)::oid
WHERE starts_with(m.lock_key, $1)
ORDER BY m.lock_key
