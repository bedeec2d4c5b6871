-- Keys are compared byte for byte: no collation folds two keys into one.
CREATE TABLE IF NOT EXISTS distlock_leases (
	lock_key   VARBINARY(512) NOT NULL PRIMARY KEY,
	token      VARCHAR(128) NOT NULL,
	fence      BIGINT NOT NULL,
	expires_at DATETIME(6) NOT NULL,
	owner      TEXT NOT NULL,
	metadata   TEXT NOT NULL,
	KEY distlock_leases_expires_at (expires_at)
) ENGINE = InnoDB;
-- One row: at least the fence of every row cleanup deleted. A new row's fence
-- starts above it. It starts at the highest fence in the table.
CREATE TABLE IF NOT EXISTS distlock_fence_floor (
	id TINYINT NOT NULL PRIMARY KEY,
	n  BIGINT NOT NULL
) ENGINE = InnoDB;
INSERT IGNORE INTO distlock_fence_floor (id, n)
SELECT 1, COALESCE(MAX(fence), 0) FROM distlock_leases
