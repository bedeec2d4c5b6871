-- Fences come from one sequence, so they keep growing for a key even after
-- cleanup deleted its row.
CREATE SEQUENCE IF NOT EXISTS distlock_fence;
CREATE TABLE IF NOT EXISTS distlock_leases (
	lock_key   text PRIMARY KEY,
	token      text NOT NULL,
	fence      bigint NOT NULL,
	expires_at timestamptz NOT NULL,
	owner      text NOT NULL,
	metadata   text NOT NULL
);
CREATE INDEX IF NOT EXISTS distlock_leases_expires_at ON distlock_leases (expires_at);
-- Keys in byte order, as Go compares strings, whatever the database's
-- collation: ListPage reads a page of it.
CREATE INDEX IF NOT EXISTS distlock_leases_key_bytes ON distlock_leases (lock_key COLLATE "C");
