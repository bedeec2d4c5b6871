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
