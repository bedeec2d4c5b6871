-- Removes a waiting writer's intent and, if it was there, wakes the
-- watchers: readers it kept out may come in. Returns {'1'}.
-- KEYS as in rwlock.lua; ARGV[1] intent, ARGV[2] prefix of the backends'
-- channels
if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
	wakeWatchers(KEYS[5], ARGV[2], (nowMs()))
end
return {'1'}
