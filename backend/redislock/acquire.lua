-- Takes the lock for a token and returns its fence, or 0 if it cannot. A
-- retry by the token that already holds returns the same fence. With a
-- handing token, the lock passes from that token, which must hold it, to the
-- new one in this one step (a handoff), and the key is never free between.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] metadata
-- ARGV[1] token, ARGV[2] time to live in ms, ARGV[3] metadata JSON or "",
-- ARGV[4] handing token or ""
-- KEYS[3], ARGV[3] and ARGV[4] may be left out when there is neither
-- metadata nor a handing token.
--
-- The lock's value is the holder's token, followed by "\n" once another
-- token has been refused the key: its release then tells the waiters, and
-- a release nobody waits for publishes nothing. Tokens never contain "\n".
--
-- The common case, a free key, costs three calls on Redis 7.0 or later: SET
-- NX, TIME and SET GET of the counter (four before 7.0: GETSET and PEXPIRE).
-- Nothing here needs more than Redis 5.0, which replicates a script's writes
-- rather than the script by default: that is what lets it read TIME first.
local meta, handing = ARGV[3] or '', ARGV[4] or ''
local waited = ARGV[1] .. '\n'
if handing ~= '' then
	local holder = redis.call('GET', KEYS[1])
	if holder == handing then
		waited = ARGV[1]
	elseif holder ~= handing .. '\n' then
		return 0
	end
	-- The waiters of the handing token now wait for this one.
	redis.call('SET', KEYS[1], waited, 'PX', ARGV[2])
elseif not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	local holder = redis.call('GET', KEYS[1])
	if holder ~= ARGV[1] and holder ~= waited then
		if holder and string.byte(holder, -1) ~= 10 then
			redis.call('APPEND', KEYS[1], '\n')
		end
		return 0
	end
	local fence = redis.call('GET', KEYS[2])
	if fence then
		return tonumber(fence)
	end
	-- The counter is gone while the token holds: renew the lock and grant a
	-- fresh fence below.
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
-- The fence is max(last + 1, server time in microseconds): a counter lost
-- with a restart or a failover, or expired, starts again above every
-- earlier fence (counter.lua says how long it lives).
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
local fence = tonumber(now)
local keep = ARGV[2] + counterLinger
local last
if redis.REDIS_VERSION_NUM then
	last = redis.call('SET', KEYS[2], now, 'PX', keep, 'GET')
else
	last = redis.call('GETSET', KEYS[2], now)
	redis.call('PEXPIRE', KEYS[2], keep)
end
if last and tonumber(last) >= fence then
	-- Ahead of the clock: go on from the counter, and keep it until the
	-- clock has passed it. The fence is written out in full (a Lua number
	-- would be sent as 1.8e+15).
	local ahead = tonumber(last) + 1 - fence
	fence = fence + ahead
	redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', keep + math.ceil(ahead / 1000))
end
if meta ~= '' then
	redis.call('SET', KEYS[3], meta, 'PX', ARGV[2])
elseif handing ~= '' then
	redis.call('DEL', KEYS[3])
end
return fence
