-- Removes a waiting request's intent and, if it was there, wakes the
-- watchers: requests it kept out may come in. Returns {'1'}.
-- KEYS as in semaphore.lua; ARGV[1] intent, ARGV[2] prefix of the backends'
-- channels
if redis.call('ZREM', KEYS[7], ARGV[1]) == 1 then
	redis.call('ZREM', KEYS[8], ARGV[1])
	wakeWatchers(KEYS[5], ARGV[2], (nowMs()))
end
return {'1'}
