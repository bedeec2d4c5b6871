-- key, token. The row stays, free, until cleanup deletes it.
UPDATE distlock_leases SET token = NULL, expires_at = UTC_TIMESTAMP(6)
WHERE lock_key = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)
