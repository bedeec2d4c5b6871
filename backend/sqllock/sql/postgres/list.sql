-- $1 and $2 the key prefix.
SELECT lock_key, fence, owner, metadata,
       (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
FROM distlock_leases
WHERE expires_at > clock_timestamp() AND left(lock_key, char_length($1)) = $2
ORDER BY lock_key COLLATE "C"
