-- key. Ends the lease whoever holds it (the caller checked, with the row
-- locked, that it is held), keeping the row and its fence until the next
-- cleanup, as release does.
UPDATE distlock_leases SET expires_at = '1970-01-01 00:00:00' WHERE lock_key = ?
