-- Takes permits as one hold for a token, if the live holds leave room for
-- them and no live intent is ahead of the request's, and returns {'granted',
-- fence}; else {'full', permits held, limit, permits wanted, intents}, or
-- {'limit', stored limit} if the stored limit is not the caller's. A name
-- without a limit gets the caller's. An intent is ahead of the request's if
-- it was recorded first, or if the request has none: so a request waits
-- behind every earlier one, whatever its size (golang.org/x/sync's
-- semaphore.Weighted). Refused with an intent, it records it after every
-- live one if it is new, and keeps it for the intent's time to live either
-- way; granted, it removes it and wakes the watchers, since the next request
-- in line may fit now. A retry by a token that holds returns its fence.
-- KEYS as in semaphore.lua; ARGV[1] token, ARGV[2] time to live in ms,
-- ARGV[3] limit, ARGV[4] metadata JSON or "", ARGV[5] permits, ARGV[6]
-- intent or "", ARGV[7] the intent's time to live in ms, ARGV[8] prefix of
-- the backends' channels
local now, t = nowMs()
local limit = redis.call('GET', KEYS[3])
if not limit then
	limit = ARGV[3]
	redis.call('SET', KEYS[3], limit)
elseif limit ~= ARGV[3] then
	return {'limit', limit}
end
dropExpired(now, KEYS[6])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
	local holder = redis.call('HGET', KEYS[2], ARGV[1])
	if holder then
		return {'granted', string.match(holder, '^%S*')}
	end
end
local wanted = tonumber(ARGV[5])
local held = redis.call('ZCARD', KEYS[1])
local first
-- While every hold is of one permit and no request waits, the weights and
-- intents are absent (the lapses go with the intents): one EXISTS spares
-- looking at them.
if redis.call('EXISTS', KEYS[6], KEYS[7]) > 0 then
	for _, w in ipairs(redis.call('HVALS', KEYS[6])) do
		held = held + tonumber(w) - 1
	end
	local lapsed = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', now)
	for _, intent in ipairs(lapsed) do
		redis.call('ZREM', KEYS[7], intent)
	end
	if #lapsed > 0 then
		redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now)
	end
	first = redis.call('ZRANGE', KEYS[7], 0, 0)[1]
end
if held + wanted > tonumber(limit) or (first and first ~= ARGV[6]) then
	if ARGV[6] ~= '' then
		if not redis.call('ZSCORE', KEYS[7], ARGV[6]) then
			local last = redis.call('ZRANGE', KEYS[7], -1, -1, 'WITHSCORES')[2]
			redis.call('ZADD', KEYS[7], (tonumber(last) or 0) + 1, ARGV[6])
		end
		redis.call('ZADD', KEYS[8], now + tonumber(ARGV[7]), ARGV[6])
		local lapse = redis.call('ZRANGE', KEYS[8], -1, -1, 'WITHSCORES')[2]
		redis.call('PEXPIREAT', KEYS[7], lapse)
		redis.call('PEXPIREAT', KEYS[8], lapse)
	end
	return {'full', tostring(held), limit, ARGV[5], tostring(redis.call('ZCARD', KEYS[7]))}
end
if first then -- the request's own intent, first in line
	redis.call('ZREM', KEYS[7], first)
	redis.call('ZREM', KEYS[8], first)
	wakeWatchers(KEYS[5], ARGV[8], now)
end
-- The fence first: a script that fails keeps the writes it made, and no
-- permit may be granted without one. Written out in full (a Lua number would
-- be sent as 1.8e+15).
local fence = string.format('%.0f', nextFence(KEYS[4], tonumber(ARGV[2]), t))
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], fence .. ' ' .. ARGV[4])
if wanted > 1 then
	redis.call('HSET', KEYS[6], ARGV[1], ARGV[5])
	keepPermits(KEYS[6])
else -- the weights, if any, live as long as the longest weighted hold already
	keepPermits()
end
return {'granted', fence}
