-- Takes a permit for a token, if fewer than the limit are held, and returns
-- {'granted', fence}; else {'full', permits held, limit}, or {'limit',
-- stored limit} if the stored limit is not the caller's. A name without a
-- limit gets the caller's. A retry by a token that holds a permit returns its
-- fence.
-- KEYS as in semaphore.lua; ARGV[1] token, ARGV[2] time to live in ms,
-- ARGV[3] limit, ARGV[4] metadata JSON or ""
local now, t = nowMs()
local limit = redis.call('GET', KEYS[3])
if not limit then
	limit = ARGV[3]
	redis.call('SET', KEYS[3], limit)
elseif limit ~= ARGV[3] then
	return {'limit', limit}
end
dropExpired(now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
	local holder = redis.call('HGET', KEYS[2], ARGV[1])
	if holder then
		return {'granted', string.match(holder, '^%S*')}
	end
end
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(limit) then
	return {'full', tostring(held), limit}
end
-- The fence first: a script that fails keeps the writes it made, and no
-- permit may be granted without one. Written out in full (a Lua number would
-- be sent as 1.8e+15).
local fence = string.format('%.0f', nextFence(KEYS[4], tonumber(ARGV[2]), t))
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], fence .. ' ' .. ARGV[4])
keepPermits()
return {'granted', fence}
