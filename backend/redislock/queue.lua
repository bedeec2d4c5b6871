-- Inserted, after counter.lua, where the scripts that use a key's queue of
-- waiters (wait, release, leave, forcerelease) say --[[queue.lua]], after
-- their fast path: Lua makes the functions below anew on every run. Their
-- keys are the lock's:
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] metadata,
-- KEYS[4] queue: a sorted set of members, scored by arrival (1, 2, ...),
-- KEYS[5] expiries: the same members, scored by the server time (ms) at
--         which they expire unless their waiter refreshes them,
-- KEYS[6] the queued waiters' metadata, by member (only those that have some),
-- KEYS[7] the lock's watchers (watchers.lua), woken by the releases that
--         release.lua names.
-- Their first argument is the same too: ARGV[1], the prefix of the clients'
-- channels.
-- A member is "<client id>|<time to live in ms>|<token>". The client id names
-- the channel the waiter's client listens on (ARGV[1] .. client id), and
-- lets a release by that same client grant its waiter the key at once.
-- A client queues only the first of its own waiters for a key; it hands the
-- key from one of its waiters to the next itself (release.lua).
--
-- The lock's value is the holder's token, followed by "\n" once a waiter
-- queued for the key: its release then passes the key on. Tokens never
-- contain "\n".
local channels = ARGV[1]

-- clockMs returns the server's time in ms, and TIME's reply (for nextFence).
local function clockMs()
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end

-- parseMember returns a member's client id, time to live and token.
local function parseMember(m)
	return string.match(m, '^([^|]*)|([^|]*)|(.*)$')
end

-- dequeue takes member out of the queue, with its metadata if it may have
-- some (hasMeta ~= false).
local function dequeue(member, hasMeta)
	redis.call('ZREM', KEYS[4], member)
	redis.call('ZREM', KEYS[5], member)
	if hasMeta ~= false then
		redis.call('HDEL', KEYS[6], member)
	end
end

-- firstLive returns the first waiter whose entry has not expired, and its
-- expiry, dropping the expired ones before it: waiters that stopped
-- refreshing, because their process died or lost Redis. Expired entries
-- further back are dropped when they come first.
local function firstLive(now)
	for _ = 1, 100 do
		local first = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
		if not first then
			return nil
		end
		local expires = tonumber(redis.call('ZSCORE', KEYS[5], first))
		if expires and expires > now then
			return first, expires
		end
		dequeue(first)
	end
	return nil -- more to drop: the next step drops them
end

-- grant gives the free key to token for ttl ms, with metadata meta (nil:
-- the queued entry's, if any), takes member, if any, out of the queue and
-- returns the fence. The lock is marked if others still wait; marked, if
-- not nil, says whether they did before, which spares a look at the queue
-- when member was not in it. t: see nextFence.
local function grant(token, ttl, meta, member, t, marked)
	local removed = 0
	if member then
		removed = redis.call('ZREM', KEYS[4], member)
		if removed > 0 then
			redis.call('ZREM', KEYS[5], member)
			local queued = redis.call('HGET', KEYS[6], member)
			if queued then
				redis.call('HDEL', KEYS[6], member)
				meta = meta or queued
			end
		end
	end
	local value = token
	if removed > 0 or marked == nil then
		marked = redis.call('EXISTS', KEYS[4]) == 1
	end
	if marked then
		value = token .. '\n'
	end
	-- The fence first: a script that fails keeps the writes it made, and the
	-- key must not be granted without one.
	local fence = nextFence(KEYS[2], ttl, t)
	redis.call('SET', KEYS[1], value, 'PX', ttl)
	if meta and meta ~= '' then
		redis.call('SET', KEYS[3], meta, 'PX', ttl)
	end
	return fence
end

-- passOn runs when the key has just become free, and passes it to the first
-- live waiter. If that waiter is localID's, it returns its member (the
-- caller grants it the key). Otherwise it grants the key to the waiter and
-- tells its client, on that client's channel, the waiter's token and the
-- fence: one notice, to the one waiter that gets the key, and no round trip
-- for it to take the key. PUBLISH counts the clients that heard it (on a
-- Cluster those connected to this node: each client listens on every
-- master); if none did, the waiter's client is gone (its process died,
-- which closed its connections), and the next waiter gets the key.
local function passOn(now, t, localID)
	for _ = 1, 100 do
		local first = firstLive(now)
		if not first then
			break
		end
		local id, ttl, token = parseMember(first)
		if id == localID then
			return first
		end
		local fence = string.format('%.0f', grant(token, ttl, nil, first, t))
		if redis.call('PUBLISH', channels .. id, token .. ' ' .. fence) > 0 then
			return nil
		end
		redis.call('DEL', KEYS[1], KEYS[3]) -- nobody heard: the next one
	end
	return nil -- more to drop: the waiters' next steps do
end
