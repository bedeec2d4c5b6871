-- $1 lock id. Runs on the pinned connection. The holder's row stays: Inspect
-- ignores it once no session with its pid holds the lock, the next grant of
-- the key overwrites it, and cleanup deletes it once stale.
SELECT pg_advisory_unlock($1)
