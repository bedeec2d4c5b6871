-- Prepended to every script that writes the fence counter: how long the
-- counter lives, and the two ways it is written.
--
-- The counter outlives the lease of its last grant or renewal by a minute
-- (ms), and outlives the server's clock reaching its value when it is ahead
-- (a clock stepped back): only once both have passed can the next fence come
-- from the clock alone and still be above every earlier one. Redis 7.0, the
-- first with redis.REDIS_VERSION_NUM, sets and extends it in one call each.
-- Nothing here needs more than Redis 5.0, which replicates a script's writes
-- rather than the script by default: that is what lets a script read TIME
-- before it writes.
local counterLinger = 60000

-- nextFence advances the counter for a grant of ttl ms and returns the new
-- fence: max(last + 1, server time in microseconds). A counter lost with a
-- restart or a failover, or expired, starts again above every earlier fence.
-- t is the reply of TIME, if the script has read it. Costs SET GET PX on
-- Redis 7.0 (GETSET and PEXPIRE before), and TIME unless given.
local function nextFence(counter, ttl, t)
	t = t or redis.call('TIME')
	local now = t[1] .. string.format('%06d', tonumber(t[2]))
	local fence = tonumber(now)
	local keep = ttl + counterLinger
	local last
	if redis.REDIS_VERSION_NUM then
		last = redis.call('SET', counter, now, 'PX', keep, 'GET')
	else
		last = redis.call('GETSET', counter, now)
		redis.call('PEXPIRE', counter, keep)
	end
	if last and tonumber(last) >= fence then
		-- Ahead of the clock: go on from the counter, and keep it until the
		-- clock has passed it. The fence is written out in full (a Lua number
		-- would be sent as 1.8e+15).
		local ahead = tonumber(last) + 1 - fence
		fence = fence + ahead
		redis.call('SET', counter, string.format('%.0f', fence), 'PX', keep + math.ceil(ahead / 1000))
	end
	return fence
end

-- keepCounter makes the counter live at least ttl + counterLinger ms from
-- now, never shortening it.
local function keepCounter(counter, ttl)
	local keep = ttl + counterLinger
	if redis.REDIS_VERSION_NUM then -- Redis 7.0 or later: PEXPIRE GT
		redis.call('PEXPIRE', counter, keep, 'GT')
	else
		local left = redis.call('PTTL', counter)
		if left >= 0 and left < keep then
			redis.call('PEXPIRE', counter, keep)
		end
	end
end

-- setNX sets key to value for ttl ms if it does not exist, and returns
-- false then; else it returns the key's value and leaves it. One call on
-- Redis 7.0 (SET NX GET), two before.
local function setNX(key, value, ttl)
	if redis.REDIS_VERSION_NUM then
		return redis.call('SET', key, value, 'NX', 'PX', ttl, 'GET')
	end
	if redis.call('SET', key, value, 'NX', 'PX', ttl) then
		return false
	end
	return redis.call('GET', key)
end
