-- $1 key. Deletes the row whoever holds it (the caller checked, with the row
-- locked, that it is held); once the transaction commits, waiters listening
-- on distlock_release learn the key is free, and the holder's backend,
-- listening on distlock_lost, learns that its hold ("<token>\n<key>") is
-- gone.
WITH released AS (
	DELETE FROM distlock_leases WHERE lock_key = $1
	RETURNING lock_key, token
)
SELECT pg_notify('distlock_release', lock_key), pg_notify('distlock_lost', token || E'\n' || lock_key)
FROM released
