-- $1 key. Inspect, locking the row until the transaction ends.
SELECT expires_at > clock_timestamp(), fence, owner, metadata,
       (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
FROM distlock_leases WHERE lock_key = $1
FOR UPDATE
