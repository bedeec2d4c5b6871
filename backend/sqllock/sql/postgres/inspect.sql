-- $1 key.
SELECT expires_at > clock_timestamp(), fence, owner, metadata,
       (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
FROM distlock_leases WHERE lock_key = $1
