-- Whether the holder table exists: every version of pglock creates it on
-- first use, so it tells a database that an older version, which locked
-- FNV-1a ids, may use. Runs before Migrate creates anything.
SELECT to_regclass('distlock_pg_locks') IS NOT NULL
