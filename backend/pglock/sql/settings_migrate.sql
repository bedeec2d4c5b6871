-- What the database records for every client, by name: key_ids is the
-- scheme that maps keys to advisory lock ids (sha256 or fnv1a). Logged: it
-- must outlive restarts.
CREATE TABLE IF NOT EXISTS distlock_pg_settings (
	name  text PRIMARY KEY,
	value text NOT NULL
);
