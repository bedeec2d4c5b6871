-- Takes the lock in a mode for a token, if the live holds and intents allow
-- it, and returns {'granted', fence}; else {'held', mode of the holds,
-- holds, intents}. A shared hold is granted while no exclusive hold and no
-- intent is live, an exclusive one while no hold is live. A refused
-- exclusive attempt with an intent records or refreshes it; a granted one
-- removes it. A retry by a token that holds the lock returns its fence.
-- KEYS as in rwlock.lua; ARGV[1] token, ARGV[2] time to live in ms, ARGV[3]
-- mode, ARGV[4] intent or "", ARGV[5] metadata JSON or "", ARGV[6] the
-- intent's time to live in ms
local now, t = nowMs()
dropExpired(now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
	local _, fence = parseHold(redis.call('HGET', KEYS[2], ARGV[1]))
	if fence then
		return {'granted', fence}
	end
end
local held = redis.call('ZCARD', KEYS[1])
local intents = redis.call('ZCARD', KEYS[3])
local mode = 'shared'
if held > 0 then
	mode = parseHold(redis.call('HGET', KEYS[2], redis.call('ZRANGE', KEYS[1], 0, 0)[1]))
end
local free = held == 0
if ARGV[3] == 'shared' then
	free = (free or mode == 'shared') and intents == 0
end
if not free then
	if ARGV[3] == 'exclusive' and ARGV[4] ~= '' then
		redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), ARGV[4])
		redis.call('PEXPIREAT', KEYS[3], redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2])
		intents = redis.call('ZCARD', KEYS[3])
	end
	return {'held', mode, tostring(held), tostring(intents)}
end
if ARGV[4] ~= '' then
	redis.call('ZREM', KEYS[3], ARGV[4])
end
-- The fence first: a script that fails keeps the writes it made, and no
-- hold may be granted without one. Written out in full (a Lua number would
-- be sent as 1.8e+15).
local fence = string.format('%.0f', nextFence(KEYS[4], tonumber(ARGV[2]), t))
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3] .. ' ' .. fence .. ' ' .. ARGV[5])
keepPermits()
return {'granted', fence}
