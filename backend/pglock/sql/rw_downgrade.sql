-- $1 lock id, $2 name, $3 token. Runs on the pinned connection of token's
-- hold. An exclusive hold's session takes the name's advisory lock shared,
-- which its own exclusive lock does not conflict with, then unlocks the
-- exclusive one, so no other session's writer finds the lock free in
-- between; each step reads the previous one's row, which fixes the order.
-- The shared lock is taken in the waiting form, which the server grants at
-- once ahead of the sessions queued for the lock (they wait for this one);
-- the conditional form would fail while one is queued (a lock's waiter).
-- The row turns shared, keeping fence, lease and metadata, and the name's
-- waiters are woken (the notice is sent at commit). Returns whether the
-- session now holds the lock shared, true at once for a shared hold's row,
-- and no row if the session has no row of token's hold.
WITH h AS MATERIALIZED (
	SELECT shared FROM distlock_pg_rw_holds WHERE name = $2 AND pid = pg_backend_pid() AND token = $3),
s AS MATERIALIZED (SELECT pg_advisory_lock_shared($1) FROM h WHERE NOT h.shared),
x AS MATERIALIZED (SELECT pg_advisory_unlock($1) AS ok FROM s),
u AS (
	UPDATE distlock_pg_rw_holds SET shared = true
	WHERE name = $2 AND pid = pg_backend_pid() AND token = $3 AND (SELECT ok FROM x)
	RETURNING pg_notify('distlock_pg_rw', $2))
SELECT h.shared OR coalesce(x.ok, false) FROM h LEFT JOIN x ON true
