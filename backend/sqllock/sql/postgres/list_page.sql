-- $1 the key the page starts after, $2 the key prefix, $3 the end of the
-- prefix's range of keys, $4 and $5 the key prefix, $6 the page size. Keys
-- compare byte for byte (COLLATE "C"), as Go compares strings, whatever the
-- database's collation: on the index distlock_leases_key_bytes, read from
-- the page's first key to its last, or to the end of the prefix's range.
SELECT lock_key, fence, owner, metadata,
       (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
FROM distlock_leases
WHERE lock_key COLLATE "C" > $1 AND lock_key COLLATE "C" >= $2 AND lock_key COLLATE "C" < $3
	AND left(lock_key, char_length($4)) = $5 AND expires_at > clock_timestamp()
ORDER BY lock_key COLLATE "C"
LIMIT $6
