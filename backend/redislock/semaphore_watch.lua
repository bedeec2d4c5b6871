-- Enters or refreshes a watcher for a time to live, or takes it out if the
-- time to live is 0. The watchers' key lives as long as its longest-lived
-- entry.
-- KEYS as in semaphore.lua; ARGV[1] "<backend id>|<watch token>", ARGV[2]
-- time to live in ms
if ARGV[2] == '0' then
	redis.call('ZREM', KEYS[5], ARGV[1])
	return {'1'}
end
local now = nowMs()
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIREAT', KEYS[5], redis.call('ZRANGE', KEYS[5], -1, -1, 'WITHSCORES')[2])
return {'1'}
