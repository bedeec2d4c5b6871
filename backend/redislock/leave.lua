-- Takes a waiter that stopped waiting out of the queue. If the key was kept
-- for it, or granted to it meanwhile (a release by its own client, or a step
-- whose reply was lost), frees the key and passes it on.
-- KEYS, ARGV[1] and ARGV[2] as in queue.lua; ARGV[3] token, ARGV[4] member
-- (or "" if it is not queued)
if ARGV[4] ~= '' then
	dequeue(ARGV[4])
end
local holder = redis.call('GET', KEYS[1])
if holder == '\n' .. ARGV[3] then
	redis.call('DEL', KEYS[1])
elseif holder == ARGV[3] or holder == ARGV[3] .. '\n' then
	redis.call('DEL', KEYS[1], KEYS[3])
else
	return 0
end
local now, t = clockMs()
passOn(now, t, nil)
return 1
