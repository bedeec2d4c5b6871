-- key. Inspect, locking the row until the transaction ends.
SELECT expires_at > UTC_TIMESTAMP(6), fence, owner, metadata,
       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM distlock_leases WHERE lock_key = ?
FOR UPDATE
