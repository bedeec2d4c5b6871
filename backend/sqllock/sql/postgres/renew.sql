-- $1 ttl in microseconds, $2 key, $3 token.
UPDATE distlock_leases SET expires_at = clock_timestamp() + $1 * interval '1 microsecond'
WHERE lock_key = $2 AND token = $3 AND expires_at > clock_timestamp()
