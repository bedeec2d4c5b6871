-- Takes a waiter that stopped waiting out of the queue. If the key was
-- granted to it meanwhile (a release whose notice had not reached it, or a
-- step whose reply was lost), frees the key and passes it on.
-- KEYS and ARGV[1] as in queue.lua; ARGV[2] token, ARGV[3] member (or "" if
-- it is not queued)
--[[queue.lua]]
if ARGV[3] ~= '' then
	dequeue(ARGV[3])
end
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[2] and holder ~= ARGV[2] .. '\n' then
	return 0
end
redis.call('DEL', KEYS[1], KEYS[3])
local now, t = clockMs()
passOn(now, t, nil)
return 1
