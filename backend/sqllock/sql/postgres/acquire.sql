-- $1 key, $2 token, $3 ttl in microseconds, $4 owner, $5 metadata.
-- Inserts, or takes over the row of an expired lease, and returns the fence;
-- returns no row if the key is held, or if clients queue for it: their
-- head holds the session advisory lock (1936813169, hashtext(key)) and
-- others wait for it (see queue.go), and the shared try-lock fails while
-- anyone holds or waits for it, so nobody barges past the queue.
-- The fence is drawn only under a transaction-scoped advisory lock on the
-- key (classid 0x73716c6b, objid hashtext(key)), which the statement keeps
-- until it commits: a WHERE without FROM is a one-time filter, checked before
-- the select list is computed. So every grant of a key draws its fence after
-- the previous grant committed, and fences rise in grant order, even for a
-- statement descheduled between drawing and inserting. Keys whose hashes
-- collide only take turns.
INSERT INTO distlock_leases (lock_key, token, fence, expires_at, owner, metadata)
SELECT $1, $2, nextval('distlock_fence'), clock_timestamp() + $3 * interval '1 microsecond', $4, $5
WHERE CASE WHEN pg_try_advisory_xact_lock_shared(1936813169, hashtext($1))
	THEN pg_advisory_xact_lock(1936813163, hashtext($1)) IS NOT NULL ELSE false END
ON CONFLICT (lock_key) DO UPDATE SET
	token = EXCLUDED.token, fence = EXCLUDED.fence, expires_at = EXCLUDED.expires_at,
	owner = EXCLUDED.owner, metadata = EXCLUDED.metadata
WHERE distlock_leases.expires_at <= clock_timestamp()
RETURNING fence
