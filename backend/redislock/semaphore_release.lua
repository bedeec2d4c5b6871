-- Frees a token's hold and wakes the watchers; returns {'1'}, or {'0'} if
-- the token held nothing live (an expired hold is taken out all the same).
-- KEYS as in semaphore.lua (a read-write lock's have no weights); ARGV[1]
-- token, ARGV[2] prefix of the backends' channels
local now = nowMs()
local expires = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expires then
	return {'0'}
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if KEYS[6] then
	redis.call('HDEL', KEYS[6], ARGV[1])
end
wakeWatchers(KEYS[5], ARGV[2], now)
if tonumber(expires) <= now then
	return {'0'}
end
return {'1'}
