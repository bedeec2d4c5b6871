-- key, token.
SELECT count(*) FROM distlock_leases
WHERE lock_key = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)
