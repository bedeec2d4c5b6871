-- key, token. Ends the lease but keeps the row, whose fence the next grant
-- of the key goes beyond, until the next cleanup. The end is set far in the
-- past, not to now: UTC_TIMESTAMP is the time a statement started, and an
-- acquisition that started before this release must see the key free.
UPDATE distlock_leases SET expires_at = '1970-01-01 00:00:00'
WHERE lock_key = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)
