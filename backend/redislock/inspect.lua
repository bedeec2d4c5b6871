-- Reports a lock as {held "1"/"0", fence, ms to live, metadata JSON}, with
-- "" for what is missing.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] metadata
local fence = redis.call('GET', KEYS[2]) or ''
if redis.call('EXISTS', KEYS[1]) == 0 then
	return {'0', fence, '0', ''}
end
return {'1', fence, tostring(redis.call('PTTL', KEYS[1])), redis.call('GET', KEYS[3]) or ''}
