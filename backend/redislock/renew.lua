-- Resets the time to live of the lock and its metadata if the token holds it
-- (with or without the waiters' mark, see queue.lua), and keeps the fence
-- counter at least counterLinger beyond the new lease (never shortening it).
-- KEYS[1] lock, KEYS[2] metadata, KEYS[3] fence counter
-- ARGV[1] token, ARGV[2] time to live in ms
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] and holder ~= ARGV[1] .. '\n' then
	return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
keepCounter(KEYS[3], ARGV[2])
return 1
