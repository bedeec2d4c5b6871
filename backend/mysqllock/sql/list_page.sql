-- The key the page starts after, the key prefix, the end of the prefix's
-- range of keys, the key prefix twice, the page size. The rows whose
-- session holds their named lock; keys are VARBINARY, compared byte for
-- byte as Go compares strings, on the index distlock_mysql_locks_key, read
-- from the page's first key on until the page is full or the prefix's
-- range ends.
SELECT lock_key, fence, owner, business_id, labels,
	TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM distlock_mysql_locks
WHERE lock_key > ? AND lock_key >= ? AND lock_key < ? AND LEFT(lock_key, LENGTH(?)) = ?
	AND IS_USED_LOCK(lock_name) = conn_id
ORDER BY lock_key
LIMIT ?
