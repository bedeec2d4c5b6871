-- key prefix (twice).
SELECT lock_key, fence, owner, metadata, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM distlock_leases
WHERE expires_at > UTC_TIMESTAMP(6) AND LEFT(lock_key, LENGTH(?)) = ?
ORDER BY lock_key
