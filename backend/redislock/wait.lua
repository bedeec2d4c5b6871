-- One step of a client's first waiter for a key (Backend.AcquireWait): take
-- the lock if it is free and the waiter's turn, else queue the waiter, or
-- keep its place. Returns {fence} once granted, else {"0", ms the lock's
-- value lives (PTTL), the waiter's place in the queue (0 is first; -1 if it
-- did not queue)}.
-- KEYS and ARGV[1] as in queue.lua.
-- ARGV[2] token, ARGV[3] time to live in ms, ARGV[4] metadata JSON or "",
-- ARGV[5] member, ARGV[6] ms an entry lives unless refreshed,
-- ARGV[7] "1" once the waiter may have queued, ARGV[8] "1" if it may queue
-- (its client listens on its channel)
local token, ttl, meta, member = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local queued = ARGV[7] == '1'
local holder
if queued then
	holder = redis.call('GET', KEYS[1])
else
	holder = setNX(KEYS[1], token, ttl)
	if not holder then
		-- A free key: the same three calls as acquire.lua.
		local fence = nextFence(KEYS[2], ttl)
		if meta ~= '' then
			redis.call('SET', KEYS[3], meta, 'PX', ttl)
		end
		return {string.format('%.0f', fence)}
	end
end
--[[queue.lua]]
local function granted(fence)
	return {string.format('%.0f', fence)}
end
if holder == token or holder == token .. '\n' then
	-- Granted already, by a release (its notice is on its way) or by an
	-- earlier step whose reply was lost: its lease counts from now.
	redis.call('PEXPIRE', KEYS[1], ttl)
	redis.call('PEXPIRE', KEYS[3], ttl)
	local fence = redis.call('GET', KEYS[2])
	if fence then
		keepCounter(KEYS[2], ttl)
		return {fence}
	end
	return granted(nextFence(KEYS[2], ttl))
end
local now, t = clockMs()
if not holder then
	-- Free, without a release (a lease ran out): the first live waiter's.
	local first = firstLive(now)
	if first and first ~= member then
		passOn(now, t, nil)
		holder = redis.call('GET', KEYS[1])
	end
	if not holder then
		return granted(grant(token, ttl, meta, member, t))
	end
end
if not queued and ARGV[8] ~= '1' then
	return {'0', tostring(redis.call('PTTL', KEYS[1])), '-1'}
end
if not queued or not redis.call('ZSCORE', KEYS[4], member) then
	local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')[2]
	redis.call('ZADD', KEYS[4], (tonumber(last) or 0) + 1, member)
	if meta ~= '' then
		redis.call('HSET', KEYS[6], member, meta)
	end
end
local expires = now + ARGV[6]
redis.call('ZADD', KEYS[5], expires, member)
-- The queue's keys live as long as its longest-lived entry.
if tonumber(redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')[2]) <= expires then
	redis.call('PEXPIREAT', KEYS[4], expires)
	redis.call('PEXPIREAT', KEYS[5], expires)
end
if meta ~= '' and redis.call('PTTL', KEYS[6]) < expires - now then
	redis.call('PEXPIREAT', KEYS[6], expires)
end
if string.byte(holder, -1) ~= 10 then
	redis.call('APPEND', KEYS[1], '\n') -- the holder's release passes the key on
end
return {'0', tostring(redis.call('PTTL', KEYS[1])), tostring(redis.call('ZRANK', KEYS[4], member))}
