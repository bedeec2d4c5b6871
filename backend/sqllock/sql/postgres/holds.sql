-- $1 key, $2 token.
SELECT count(*) FROM distlock_leases
WHERE lock_key = $1 AND token = $2 AND expires_at > clock_timestamp()
