-- The key the page starts after, the key prefix, the end of the prefix's
-- range of keys, the key prefix twice, the page size. lock_key is
-- VARBINARY: keys compare byte for byte, as Go compares strings, on the
-- primary key, read from the page's first key to its last, or to the end of
-- the prefix's range.
SELECT lock_key, fence, owner, metadata, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM distlock_leases
WHERE lock_key > ? AND lock_key >= ? AND lock_key < ? AND LEFT(lock_key, LENGTH(?)) = ?
	AND expires_at > UTC_TIMESTAMP(6)
ORDER BY lock_key
LIMIT ?
