-- Prepended, after counter.lua and watchers.lua, to every semaphore script. A
-- semaphore's keys share the hash tag of its name (see semaphore.go):
-- KEYS[1] permits: the holders' tokens, scored by the server time (ms) at
--         which their hold expires,
-- KEYS[2] holders: by token, "<fence> <metadata JSON>" (metadata may be
--         empty),
-- KEYS[3] limit: the number of permits, kept until deleted,
-- KEYS[4] fence counter (counter.lua),
-- KEYS[5] watchers (watchers.lua),
-- KEYS[6] weights: by token, the permits of each hold of more than one; a
--         hold not in it counts one,
-- KEYS[7] intents: the waiting requests' intents, scored by the order in
--         which they were first recorded,
-- KEYS[8] lapses: the same intents, scored by the server time (ms) at which
--         they lapse unless their request tries again.
-- A hold or intent whose expiry is not after now has expired.
-- Also prepended to the read-write lock scripts (rwlock.lua), whose keys take
-- the same places up to KEYS[5], but for KEYS[3], the waiting writers'
-- intents, and whose holders' values begin with the mode; they have no
-- KEYS[6] on, so the functions below take the weights key as an argument,
-- nil for them.

-- nowMs returns the server's time in ms, and TIME's reply (for nextFence).
local function nowMs()
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end

-- dropExpired takes the expired holds out, with their holders and weights.
local function dropExpired(now, weights)
	local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
	for _, token in ipairs(gone) do
		redis.call('HDEL', KEYS[2], token)
		if weights then
			redis.call('HDEL', weights, token)
		end
	end
	if #gone > 0 then
		redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
	end
end

-- keepPermits makes the holds, their holders and weights live exactly as
-- long as the longest-lived hold.
local function keepPermits(weights)
	local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
	if last then
		redis.call('PEXPIREAT', KEYS[1], last)
		redis.call('PEXPIREAT', KEYS[2], last)
		if weights then
			redis.call('PEXPIREAT', weights, last)
		end
	end
end
