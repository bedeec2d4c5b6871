-- Enters or refreshes a watcher for a time to live, or takes it out if the
-- time to live is 0. The watchers' key lives as long as its longest-lived
-- entry.
-- KEYS[1] watchers (watchers.lua); ARGV[1] "<backend id>|<watch token>",
-- ARGV[2] time to live in ms
if ARGV[2] == '0' then
	redis.call('ZREM', KEYS[1], ARGV[1])
	return {'1'}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIREAT', KEYS[1], redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2])
return {'1'}
