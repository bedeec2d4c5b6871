-- Deletes the lock and its metadata whatever token holds it, and reports what
-- it held as inspect.lua does: {held "1"/"0", fence, ms to live, metadata
-- JSON}. A free key is left as it is. If waiters may be queued, the key
-- passes to the first live one, as release.lua does for another client. The
-- key's watchers are woken, and the hold is published on the channel
-- ARGV[1] .. 'lost', on which every backend holding locks listens, as
-- "<token>\n<reason>\n<key>", the reason being taken (a waiter now holds
-- the key) or deleted (it is free), so that the holder learns at once. The
-- fence counter stays, so the next grant gets a higher fence.
-- ARGV[2] is the lock key.
-- KEYS and ARGV[1] as in queue.lua
--[[queue.lua]]
local holder = redis.call('GET', KEYS[1])
if not holder then
	return {'0', '', '0', ''}
end
local held = {'1', redis.call('GET', KEYS[2]) or '', tostring(redis.call('PTTL', KEYS[1])), redis.call('GET', KEYS[3]) or ''}
redis.call('DEL', KEYS[1], KEYS[3])
local token = holder
if string.byte(holder, -1) == 10 then
	token = string.sub(holder, 1, -2)
	local now, t = clockMs()
	passOn(now, t, nil)
end
local reason = 'deleted'
if redis.call('EXISTS', KEYS[1]) == 1 then
	reason = 'taken'
end
redis.call('PUBLISH', ARGV[1] .. 'lost', token .. '\n' .. reason .. '\n' .. ARGV[2])
wakeWatchers(KEYS[7], ARGV[1])
return held
