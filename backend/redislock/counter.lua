-- Prepended to acquire.lua and renew.lua: how long the fence counter lives.
-- The counter outlives the lease of its last grant or renewal by a minute,
-- and outlives the server's clock reaching its value when it is ahead (a
-- clock stepped back): only once both have passed can the next fence come
-- from the clock alone and still be above every earlier one.
local counterLinger = 60000

-- int formats a whole number without an exponent (exact below 2^53).
local function int(n)
	return string.format('%.0f', n)
end

-- setCounter sets the counter to value, to live ms milliseconds, and returns
-- its previous value or false. Redis 7.0 (the first with REDIS_VERSION_NUM)
-- does it in one call; before, it takes GETSET and PEXPIRE.
local function setCounter(key, value, ms)
	if redis.REDIS_VERSION_NUM then
		return redis.call('SET', key, value, 'PX', int(ms), 'GET')
	end
	local last = redis.call('GETSET', key, value)
	redis.call('PEXPIRE', key, int(ms))
	return last
end
