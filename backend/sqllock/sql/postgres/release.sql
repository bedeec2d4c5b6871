-- $1 key, $2 token. The fence lives on in the sequence, not in the row.
DELETE FROM distlock_leases
WHERE lock_key = $1 AND token = $2 AND expires_at > clock_timestamp()
