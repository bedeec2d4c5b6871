-- Takes the lock for a token and returns its fence, or 0 if it cannot: one
-- attempt, that never queues (wait.lua queues), as take.lua says. With a
-- handing token, the lock passes from that token, which must hold it, to
-- the new one in this one step (a handoff), and the key is never free
-- between.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] metadata
-- ARGV[1] token, ARGV[2] time to live in ms, ARGV[3] metadata JSON or "",
-- ARGV[4] handing token or ""
-- KEYS[3], ARGV[3] and ARGV[4] may be left out when there is neither
-- metadata nor a handing token.
local meta, handing = ARGV[3] or '', ARGV[4] or ''
if handing == '' then
	return take(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], meta)
end
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
local fence = nextFence(KEYS[2], ARGV[2])
if meta ~= '' then
	redis.call('SET', KEYS[3], meta, 'PX', ARGV[2])
else
	redis.call('DEL', KEYS[3])
end
return fence
