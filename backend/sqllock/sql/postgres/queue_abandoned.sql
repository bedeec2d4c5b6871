-- $1 key, $2 pid of a session whose connection the backend dropped while
-- the session may have held or waited for the key's queue lock (see
-- queue.go). Ends the session if it holds or waits for that lock, and
-- returns whether it still runs. The server frees a session's locks only
-- once it ends it, which for a dropped connection it does when it reads
-- the client's Terminate or finds the connection closed; a session that
-- waits for a lock looks for neither. Only a session in the key's queue is
-- ended: one that took the pid over later would have to queue for the same
-- key.
SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $2),
	(SELECT count(pg_terminate_backend(pid)) FROM pg_locks
	WHERE locktype = 'advisory' AND classid = 1936813169 AND objid = hashtext($1)::oid
		AND objsubid = 2 AND pid = $2)
