-- Reads no row, but fails if the table or the sequence Migrate makes is missing.
SELECT 1 FROM distlock_leases, distlock_fence LIMIT 0
