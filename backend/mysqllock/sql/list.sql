-- key prefix (twice). The rows whose session holds their named lock.
SELECT lock_key, fence, owner, business_id, labels,
	TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM distlock_mysql_locks
WHERE LEFT(lock_key, LENGTH(?)) = ? AND IS_USED_LOCK(lock_name) = conn_id
ORDER BY lock_key
