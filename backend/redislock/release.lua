-- Deletes the lock and its metadata if the token holds it, and announces the
-- release to waiters. The fence counter stays.
-- KEYS[1] lock, KEYS[2] metadata; ARGV[1] token, ARGV[2] release channel
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('PUBLISH', ARGV[2], '')
return 1
