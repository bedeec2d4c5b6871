-- Prepended to the scripts that take a key (after counter.lua).

-- take takes lock for token for ttl ms, with metadata meta ('' for none,
-- then metaKey may be nil), and returns the fence, or 0 if another token
-- holds it. A retry by the token that already holds renews the lock for
-- ttl and returns the same fence. A free key (queue.lua says what the
-- lock's values mean) costs three calls on Redis 7.0 or later: SET NX GET,
-- TIME and SET GET of the counter; a held one, one call.
local function take(lock, counter, metaKey, token, ttl, meta)
	local holder = setNX(lock, token, ttl)
	if holder then
		if holder ~= token and holder ~= token .. '\n' then
			return 0 -- held
		end
		-- The token holds already (a retry whose first reply was lost): its
		-- lease counts from this request, as the caller counts it.
		redis.call('PEXPIRE', lock, ttl)
		if metaKey then
			redis.call('PEXPIRE', metaKey, ttl)
		end
		local fence = redis.call('GET', counter)
		if fence then
			keepCounter(counter, ttl)
			return tonumber(fence)
		end
		-- The counter is gone while the token holds: grant a fresh fence
		-- below.
	end
	local fence = nextFence(counter, ttl)
	if meta ~= '' then
		redis.call('SET', metaKey, meta, 'PX', ttl)
	end
	return fence
end
