-- $1 the key the page starts after, $2 the key prefix, $3 the end of the
-- prefix's range of keys, $4 the page size (NULL: every row, for List). The rows whose session holds
-- their advisory lock, keys compared byte for byte (COLLATE "C"), as Go
-- compares strings, whatever the database's collation: on the index
-- distlock_pg_locks_key_bytes, read from the page's first key to its last,
-- or to the end of the prefix's range.
SELECT m.lock_key, m.fence, m.meta,
       (extract(epoch FROM m.expires_at - clock_timestamp()) * 1000000)::bigint AS ttl_us
FROM distlock_pg_locks m
JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid = m.pid
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND l.classid = ((m.lock_id >> 32) & 4294967295)::oid
	AND l.objid = (m.lock_id & 4294967295)::oid
WHERE m.lock_key COLLATE "C" > $1 AND m.lock_key COLLATE "C" >= $2 AND m.lock_key COLLATE "C" < $3
	AND starts_with(m.lock_key, $2)
ORDER BY m.lock_key COLLATE "C"
LIMIT $4
