-- Reads no row, but fails if a table Migrate makes is missing.
SELECT 1 FROM distlock_leases, distlock_fence_floor LIMIT 0
