-- Fences come from one sequence (MariaDB 10.3 and later), so they keep
-- growing for a key even after cleanup deleted its row.
CREATE SEQUENCE IF NOT EXISTS distlock_fence;
-- Keys are compared byte for byte: no collation folds two keys into one.
CREATE TABLE IF NOT EXISTS distlock_leases (
	lock_key   VARBINARY(512) NOT NULL PRIMARY KEY,
	token      CHAR(32) NOT NULL,
	fence      BIGINT NOT NULL,
	expires_at DATETIME(6) NOT NULL,
	owner      TEXT NOT NULL,
	metadata   TEXT NOT NULL,
	KEY distlock_leases_expires_at (expires_at)
) ENGINE = InnoDB;
