-- ttl in microseconds, key, token.
UPDATE distlock_leases SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE lock_key = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)
