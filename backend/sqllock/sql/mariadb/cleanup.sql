-- retention in microseconds, batch size (both statements).
-- First raise the fence floor to the highest fence of the rows the delete
-- will take: its exclusive lock waits for acquisitions that read the floor.
UPDATE distlock_fence_floor SET n = GREATEST(n, COALESCE((
	SELECT MAX(fence) FROM (
		SELECT fence FROM distlock_leases
		WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
		ORDER BY expires_at LIMIT ?) AS old), 0))
WHERE id = 1;
-- Then delete at most that many rows that ended more than the retention ago,
-- only those whose fence the floor covers.
DELETE FROM distlock_leases
WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
  AND fence <= (SELECT n FROM distlock_fence_floor WHERE id = 1)
ORDER BY expires_at
LIMIT ?
