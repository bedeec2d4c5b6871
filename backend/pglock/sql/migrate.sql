-- The fence sequence is logged: it survives restarts, so fences keep growing.
CREATE SEQUENCE IF NOT EXISTS distlock_pg_fence;
-- The holder table is unlogged: a row is only meaningful while its holder's
-- session lives, and every restart ends every session.
CREATE UNLOGGED TABLE IF NOT EXISTS distlock_pg_locks (
	lock_key   text PRIMARY KEY,
	lock_id    bigint NOT NULL,
	token      text NOT NULL,
	fence      bigint NOT NULL,
	pid        integer NOT NULL,
	expires_at timestamptz NOT NULL,
	meta       jsonb NOT NULL
);
-- Keys in byte order, as Go compares strings, whatever the database's
-- collation: ListPage reads a page of it. CREATE INDEX locks the table
-- against writes, IF NOT EXISTS too, and an acquisition waiting for its
-- advisory lock holds the table for its whole wait: behind such a wait, it
-- would stall every other acquisition. So it runs only where the index is
-- missing, gives up after a short wait, and a later Migrate makes it
-- (ListPage reads the whole table meanwhile).
DO $$
DECLARE
	lock_timeout text := current_setting('lock_timeout');
BEGIN
	IF to_regclass('distlock_pg_locks_key_bytes') IS NULL THEN
		PERFORM set_config('lock_timeout', '100ms', true);
		CREATE INDEX distlock_pg_locks_key_bytes ON distlock_pg_locks (lock_key COLLATE "C");
		PERFORM set_config('lock_timeout', lock_timeout, true);
	END IF;
EXCEPTION WHEN lock_not_available THEN
	NULL; -- and the block's setting of lock_timeout is undone
END $$;
