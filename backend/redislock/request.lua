-- Asks the holder of a lock to release it: publishes "<token> <reason>" on
-- the channel ARGV[1] .. 'lost', on which every backend holding locks
-- listens, records the same under KEYS[4] for as long as the lock lives
-- (a holder not yet subscribed reads it once it is), and reports the lock as
-- inspect.lua does. A free key is left as it is and nobody is told.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] metadata, KEYS[4] the request;
-- ARGV[2] the reason
local holder = redis.call('GET', KEYS[1])
if not holder then
	return {'0', '', '0', ''}
end
if string.byte(holder, -1) == 10 then -- the waiters' mark (queue.lua)
	holder = string.sub(holder, 1, -2)
end
local ttl = redis.call('PTTL', KEYS[1])
local notice = holder .. ' ' .. ARGV[2]
redis.call('SET', KEYS[4], notice, 'PX', ttl > 0 and ttl or 60000)
redis.call('PUBLISH', ARGV[1] .. 'lost', notice)
return {'1', redis.call('GET', KEYS[2]) or '', tostring(ttl), redis.call('GET', KEYS[3]) or ''}
