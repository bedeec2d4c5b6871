-- $1 key. Deletes the row whoever holds it (the caller checked, with the row
-- locked, that it is held); waiters listening on distlock_release learn the
-- key is free once the transaction commits.
WITH released AS (
	DELETE FROM distlock_leases WHERE lock_key = $1
	RETURNING lock_key
)
SELECT pg_notify('distlock_release', lock_key) FROM released
