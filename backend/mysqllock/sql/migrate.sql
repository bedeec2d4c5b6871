-- One row per lock name: the fence of the key's last grant and what its
-- holder recorded. Names and keys compare byte for byte (VARBINARY): no
-- collation folds two keys into one. A named lock is not a row: the row only
-- describes it, and Inspect trusts it only while IS_USED_LOCK(lock_name) is
-- the session in conn_id.
CREATE TABLE IF NOT EXISTS distlock_mysql_locks (
	lock_name   VARBINARY(64) NOT NULL PRIMARY KEY,
	lock_key    VARBINARY(512) NOT NULL,
	fence       BIGINT NOT NULL,
	token       VARCHAR(128) NOT NULL,
	conn_id     BIGINT UNSIGNED NOT NULL,
	since       DATETIME(6) NOT NULL,
	expires_at  DATETIME(6) NOT NULL,
	owner       TEXT NOT NULL,
	business_id TEXT NOT NULL,
	labels      TEXT NOT NULL,
	KEY distlock_mysql_locks_key (lock_key),
	KEY distlock_mysql_locks_expires_at (expires_at)
) ENGINE = InnoDB
