-- Takes the lock for a token and returns its fence, or 0 if it cannot: one
-- attempt, that never queues (wait.lua queues). A retry by the token that
-- already holds renews the lock for the time to live and returns the same
-- fence. With a handing token, the lock
-- passes from that token, which must hold it, to the new one in this one
-- step (a handoff), and the key is never free between.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] metadata
-- ARGV[1] token, ARGV[2] time to live in ms, ARGV[3] metadata JSON or "",
-- ARGV[4] handing token or ""
-- KEYS[3], ARGV[3] and ARGV[4] may be left out when there is neither
-- metadata nor a handing token.
--
-- A free key (queue.lua says what the lock's values mean) costs three calls on Redis 7.0 or later: SET NX GET, TIME and SET
-- GET of the counter; a held one, one call.
local meta, handing = ARGV[3] or '', ARGV[4] or ''
if handing ~= '' then
	local holder = redis.call('GET', KEYS[1])
	local value
	if holder == handing then
		value = ARGV[1]
	elseif holder == handing .. '\n' then
		value = ARGV[1] .. '\n' -- the waiters of the handing token now wait for this one
	else
		return 0
	end
	redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
else
	local holder = setNX(KEYS[1], ARGV[1], ARGV[2])
	if holder and holder ~= ARGV[1] and holder ~= ARGV[1] .. '\n' then
		return 0 -- held
	end
	if holder then
		-- The token holds already (a retry whose first reply was lost): its
		-- lease counts from this request, as the caller counts it.
		redis.call('PEXPIRE', KEYS[1], ARGV[2])
		if KEYS[3] then
			redis.call('PEXPIRE', KEYS[3], ARGV[2])
		end
		local fence = redis.call('GET', KEYS[2])
		if fence then
			keepCounter(KEYS[2], ARGV[2])
			return tonumber(fence)
		end
		-- The counter is gone while the token holds: grant a fresh fence
		-- below.
	end
end
local fence = nextFence(KEYS[2], ARGV[2])
if meta ~= '' then
	redis.call('SET', KEYS[3], meta, 'PX', ARGV[2])
elseif handing ~= '' then
	redis.call('DEL', KEYS[3])
end
return fence
