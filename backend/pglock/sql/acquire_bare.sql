-- $1 lock id. Without holder rows: the lock and its fence, nothing written.
WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock($1) AS ok)
SELECT nextval('distlock_pg_fence') FROM l WHERE l.ok
