-- Reports a read-write lock as {mode of the live holds ("shared" if none),
-- live intents, then per live hold: fence, ms to live, metadata JSON (""
-- if none)}. Writes nothing.
-- KEYS as in rwlock.lua
local now = nowMs()
local out = {'shared', tostring(redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf'))}
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
	local mode, fence, meta = parseHold(redis.call('HGET', KEYS[2], live[i]))
	out[1] = mode or out[1]
	out[#out + 1] = fence or ''
	out[#out + 1] = string.format('%.0f', tonumber(live[i + 1]) - now)
	out[#out + 1] = meta or ''
end
return out
