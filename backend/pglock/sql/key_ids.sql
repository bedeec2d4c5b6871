-- $1 the scheme to record if the database records none. Returns the
-- recorded scheme. Runs under the migration's advisory lock, so no other
-- migration inserts meanwhile.
WITH cur AS (SELECT value FROM distlock_pg_settings WHERE name = 'key_ids'),
ins AS (
	INSERT INTO distlock_pg_settings (name, value)
	SELECT 'key_ids', $1 WHERE NOT EXISTS (SELECT 1 FROM cur)
	RETURNING value)
SELECT value FROM cur UNION ALL SELECT value FROM ins
