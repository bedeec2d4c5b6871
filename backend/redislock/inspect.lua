-- Reports a lock as {held "1"/"0", fence, ms to live, metadata JSON}, with
-- "" for what is missing. A key kept for a waiter's turn is not held.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] metadata
local fence = redis.call('GET', KEYS[2]) or ''
local holder = redis.call('GET', KEYS[1])
if not holder or string.byte(holder, 1) == 10 then
	return {'0', fence, '0', ''}
end
return {'1', fence, tostring(redis.call('PTTL', KEYS[1])), redis.call('GET', KEYS[3]) or ''}
