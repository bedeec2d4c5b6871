-- $1 lock id, $2 key, $3 ms to wait for each ended session to exit.
-- Ends every session that holds the advisory lock, one row each, with what
-- the holder row said of the hold if that session wrote it.
WITH h AS MATERIALIZED (
	SELECT pid FROM pg_locks
	WHERE locktype = 'advisory' AND granted AND objsubid = 1
	  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	  AND classid = (($1::bigint >> 32) & 4294967295)::oid
	  AND objid = ($1::bigint & 4294967295)::oid
), m AS MATERIALIZED (
	SELECT pid, fence, meta, expires_at FROM distlock_pg_locks
	WHERE lock_key = $2 AND pid IN (SELECT pid FROM h)
), ended AS MATERIALIZED (
	SELECT pid, pg_terminate_backend(pid, $3) AS exited FROM h
)
SELECT e.pid, e.exited,
       COALESCE(m.fence, 0) AS fence,
       COALESCE(m.meta, '{}'::jsonb) AS meta,
       COALESCE((extract(epoch FROM m.expires_at - clock_timestamp()) * 1000000)::bigint, 0) AS ttl_us
FROM ended e LEFT JOIN m ON m.pid = e.pid
