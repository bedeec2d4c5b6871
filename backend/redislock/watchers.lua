-- Prepended to every script that frees what watchers wait for: a lock's
-- release and force release, and semaphore.lua's scripts. A watchers key is
-- a sorted set of "<backend id>|<watch token>", each scored by the server
-- time (ms) at which it expires unless its backend refreshes it (watch.lua).

-- wakeWatchers tells every watcher in watchers, on its backend's channel
-- (channels .. backend id), its watch token. Given now, it drops the expired
-- entries first; without, an expired entry is told too (a dead backend's
-- channel has no listener) and the next watch.lua drops it.
local function wakeWatchers(watchers, channels, now)
	if now then
		redis.call('ZREMRANGEBYSCORE', watchers, '-inf', now)
	end
	for _, w in ipairs(redis.call('ZRANGE', watchers, 0, -1)) do
		local id, token = string.match(w, '^([^|]*)|(.*)$')
		redis.call('PUBLISH', channels .. id, token)
	end
end
