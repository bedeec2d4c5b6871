-- Resets the time to live of a token's live hold and returns {'1'}, or
-- {'0'} if the token holds none. The fence counter lives at least a minute
-- beyond the new lease.
-- KEYS as in semaphore.lua (a read-write lock's have no weights); ARGV[1]
-- token, ARGV[2] time to live in ms
local now = nowMs()
local expires = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expires or tonumber(expires) <= now then
	return {'0'}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
keepPermits(KEYS[6])
keepCounter(KEYS[4], tonumber(ARGV[2]))
return {'1'}
