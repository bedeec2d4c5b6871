-- retention in microseconds, batch size. Deletes at most that many rows that
-- expired more than the retention ago.
DELETE FROM distlock_leases
WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
LIMIT ?
