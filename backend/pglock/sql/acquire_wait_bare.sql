-- $1 lock id. Without holder rows: waits in the database's own lock queue,
-- then takes a fence.
WITH l AS MATERIALIZED (SELECT pg_advisory_lock($1))
SELECT nextval('distlock_pg_fence') FROM l
