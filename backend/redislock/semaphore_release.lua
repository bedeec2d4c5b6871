-- Frees a token's permit and wakes the watchers; returns {'1'}, or {'0'} if
-- the token held no live permit (an expired one is taken out all the same).
-- KEYS as in semaphore.lua; ARGV[1] token, ARGV[2] prefix of the backends'
-- channels
local now = nowMs()
local expires = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expires then
	return {'0'}
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
wakeWatchers(KEYS[5], ARGV[2], now)
if tonumber(expires) <= now then
	return {'0'}
end
return {'1'}
