-- Turns a token's live exclusive hold into a shared one of the same fence,
-- expiry and metadata, and wakes the watchers: readers the hold kept out may
-- join it, while a writer still finds a live hold. Returns {'1'}, for a hold
-- that was shared already too, or {'0'} if the token holds nothing live.
-- HSET keeps the holders' expiry, and the fence counter is not touched.
-- KEYS as in rwlock.lua; ARGV[1] token, ARGV[2] prefix of the backends'
-- channels
local now = nowMs()
local expires = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expires or tonumber(expires) <= now then
	return {'0'}
end
local mode, fence, meta = parseHold(redis.call('HGET', KEYS[2], ARGV[1]))
if not fence then
	return {'0'}
end
if mode == 'exclusive' then
	redis.call('HSET', KEYS[2], ARGV[1], 'shared ' .. fence .. ' ' .. meta)
	wakeWatchers(KEYS[5], ARGV[2], now)
end
return {'1'}
