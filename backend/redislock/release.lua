-- Frees the key if the token holds it, and returns {"0"} if it does not.
--
-- With a next waiter (ARGV[4] on), a waiter of the releasing client that
-- stands first in that client's own line, the key passes straight to it: if
-- nobody else is queued (the value is not marked, see queue.lua), or if
-- ARGV[8] allows passing over the queue (the client bounds how many times in
-- a row it does). Returns {"2", next token, fence, "1" if it passed over
-- queued waiters, else "0"}.
--
-- Otherwise the lock and its metadata are deleted and, if waiters may be
-- queued, the key passes to the first live one (passOn): granted, and for
-- the releasing client's own waiter returned as {"2", its token, fence,
-- "0"}. Returns {"1"} once released or passed to another client's waiter,
-- having woken the key's watchers (watchers.lua), which the common case
-- does only where it says so. The fence counter stays.
-- KEYS and ARGV[1] as in queue.lua; ARGV[2] token, ARGV[3] the releasing
-- client's id; optionally the next waiter: ARGV[4] token, ARGV[5] time to
-- live in ms, ARGV[6] metadata JSON or "", ARGV[7] member, ARGV[8] "1" if it
-- may pass over queued waiters
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[2] and not ARGV[4] then -- nobody waits: the common case
	redis.call('DEL', KEYS[1], KEYS[3])
	-- WithWatchedReleases wakes the watchers here:
	--[[wake]]
	return {'1'}
end
local marked = holder == ARGV[2] .. '\n'
if holder ~= ARGV[2] and not marked then
	return {'0'}
end
--[[queue.lua]]
local over = '0'
if marked then
	over = '1'
end
if ARGV[4] and (not marked or ARGV[8] == '1') then
	redis.call('DEL', KEYS[3])
	return {'2', ARGV[4], string.format('%.0f', grant(ARGV[4], ARGV[5], ARGV[6], ARGV[7], nil, marked)), over}
end
redis.call('DEL', KEYS[1], KEYS[3])
local first, t
if marked then
	local now
	now, t = clockMs()
	first = passOn(now, t, ARGV[3])
end
if not first then
	wakeWatchers(KEYS[7], ARGV[1])
	return {'1'}
end
local _, ttl, token = parseMember(first)
local meta
if first == ARGV[7] then
	meta = ARGV[6]
end
return {'2', token, string.format('%.0f', grant(token, ttl, meta, first, t)), '0'}
