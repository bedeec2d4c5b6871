-- retention in microseconds, batch size. Deletes rows whose lease ended more
-- than the retention ago and whose named lock nobody holds. The next grant
-- of such a key starts its fence at the server's clock in microseconds,
-- above every fence the deleted row had (see acquire.sql).
DELETE FROM distlock_mysql_locks
WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AND IS_USED_LOCK(lock_name) IS NULL
ORDER BY expires_at
LIMIT ?
