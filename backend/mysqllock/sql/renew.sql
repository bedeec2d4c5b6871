-- ttl in microseconds, name, token. Runs on the pinned connection: its
-- success proves the session, and so the named lock, is alive.
UPDATE distlock_mysql_locks SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE lock_name = ? AND token = ?
