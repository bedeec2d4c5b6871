-- $1 key, $2 token. The fence lives on in the sequence, not in the row.
-- Waiters listening on distlock_release learn the key is free; the notice is
-- sent only if the transaction commits.
WITH released AS (
	DELETE FROM distlock_leases
	WHERE lock_key = $1 AND token = $2 AND expires_at > clock_timestamp()
	RETURNING lock_key
)
SELECT pg_notify('distlock_release', lock_key) FROM released
