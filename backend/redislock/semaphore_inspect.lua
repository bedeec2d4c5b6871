-- Reports a semaphore as {limit ("0" if none is stored), then per live
-- hold: fence, ms to live, metadata JSON ("" if none), permits}. Writes
-- nothing.
-- KEYS as in semaphore.lua
local now = nowMs()
local out = {redis.call('GET', KEYS[3]) or '0'}
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
	local fence, meta = string.match(redis.call('HGET', KEYS[2], live[i]) or '', '^(%S*) ?(.*)$')
	out[#out + 1] = fence
	out[#out + 1] = string.format('%.0f', tonumber(live[i + 1]) - now)
	out[#out + 1] = meta
	out[#out + 1] = redis.call('HGET', KEYS[6], live[i]) or '1'
end
return out
