-- Deletes the lock and its metadata if the token holds it and, if another
-- token was refused the key meanwhile (acquire.lua), announces the release to
-- waiters. The fence counter stays.
-- KEYS[1] lock, also the release channel, KEYS[2] metadata; ARGV[1] token
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
	redis.call('DEL', KEYS[1], KEYS[2])
	return 1
elseif holder == ARGV[1] .. '\n' then
	redis.call('DEL', KEYS[1], KEYS[2])
	redis.call('PUBLISH', KEYS[1], '')
	return 1
end
return 0
