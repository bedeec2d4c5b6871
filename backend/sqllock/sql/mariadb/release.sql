-- key, token. The fence lives on in the sequence, not in the row.
DELETE FROM distlock_leases
WHERE lock_key = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)
