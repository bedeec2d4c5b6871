-- $1 key, $2 token. The row stays, free, until cleanup deletes it.
UPDATE distlock_leases SET token = NULL, expires_at = clock_timestamp()
WHERE lock_key = $1 AND token = $2 AND expires_at > clock_timestamp()
