-- Stores the limit and wakes the watchers, who may now find room.
-- KEYS as in semaphore.lua; ARGV[1] limit, ARGV[2] prefix of the backends'
-- channels
redis.call('SET', KEYS[3], ARGV[1])
wakeWatchers(KEYS[5], ARGV[2], (nowMs()))
return {'1'}
