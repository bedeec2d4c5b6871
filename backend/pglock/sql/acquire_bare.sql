-- $1 lock id. Without holder rows: the lock and its fence, nothing written.
-- A WHERE without FROM is a one-time filter: nextval runs only if the lock
-- was taken, so a failed try takes no fence.
SELECT nextval('distlock_pg_fence') WHERE pg_try_advisory_lock($1)
