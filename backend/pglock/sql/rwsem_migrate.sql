-- Read-write locks and semaphores. The hold tables are unlogged: a row is
-- only meaningful while its holder's session lives, and every restart ends
-- every session. A semaphore's limit is configuration: logged.
CREATE UNLOGGED TABLE IF NOT EXISTS distlock_pg_rw_holds (
	name       text NOT NULL,
	pid        integer NOT NULL,
	lock_id    bigint NOT NULL,
	shared     boolean NOT NULL,
	token      text NOT NULL,
	fence      bigint NOT NULL,
	expires_at timestamptz NOT NULL,
	meta       jsonb NOT NULL,
	PRIMARY KEY (name, pid)
);
CREATE UNLOGGED TABLE IF NOT EXISTS distlock_pg_rw_intents (
	name       text NOT NULL,
	intent     text NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (name, intent)
);
CREATE TABLE IF NOT EXISTS distlock_pg_semaphores (
	name    text PRIMARY KEY,
	permits integer NOT NULL,
	slots   integer NOT NULL
);
CREATE UNLOGGED TABLE IF NOT EXISTS distlock_pg_permits (
	name       text NOT NULL,
	slot       integer NOT NULL,
	pid        integer NOT NULL,
	token      text NOT NULL,
	fence      bigint NOT NULL,
	expires_at timestamptz NOT NULL,
	meta       jsonb NOT NULL,
	PRIMARY KEY (name, slot)
);
