-- Takes the lock for a token and returns its fence, or 0 if another token
-- holds it. A retry by the token that already holds returns the same fence.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] metadata
-- ARGV[1] token, ARGV[2] time to live in ms, ARGV[3] metadata JSON or ""
redis.replicate_commands() -- effects replication for TIME (a no-op from Redis 5)
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
	local fence = redis.call('GET', KEYS[2])
	if fence then
		return tonumber(fence)
	end
	-- The counter is gone while the token holds: grant a fresh fence below.
elseif holder then
	return 0
end
-- The fence is max(last + 1, server time in microseconds): a counter lost
-- with a restart or a failover starts again above every earlier fence.
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
local fence = redis.call('INCR', KEYS[2])
if fence < tonumber(now) then
	redis.call('SET', KEYS[2], now)
	fence = tonumber(now)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[3] ~= '' then
	redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
end
return fence
