-- $1 name, $2 limit. Slots keep the highest limit until no permit is held
-- above the new one (see sem_acquire.sql); waiters are woken to look.
WITH s AS (
	INSERT INTO distlock_pg_semaphores (name, permits, slots) VALUES ($1, $2, $2)
	ON CONFLICT (name) DO UPDATE SET
		permits = EXCLUDED.permits, slots = GREATEST(EXCLUDED.permits, distlock_pg_semaphores.slots))
SELECT pg_notify('distlock_pg_sem', $1)
