-- Frees the key if the token holds it, and returns {"0"} if it does not.
--
-- With a next waiter (ARGV[5] on), a waiter of the releasing client that
-- stands first in that client's own line, the key passes straight to it: if
-- nobody else is queued (the value is not marked, see queue.lua), or if
-- ARGV[9] allows passing over the queue (the client bounds how many times in
-- a row it does). Returns {"2", next token, fence, "1" if it passed over
-- queued waiters, else "0"}.
--
-- Otherwise the lock and its metadata are deleted and, if waiters may be
-- queued, the key passes to the first live one: granted at once if it is
-- the releasing client's own ({"2", its token, fence, "0"}), else kept for it
-- and announced to it alone ({"1"}). Returns {"1"} once released. The fence
-- counter stays.
-- KEYS, ARGV[1] and ARGV[2] as in queue.lua; ARGV[3] token, ARGV[4] the
-- releasing client's id; optionally the next waiter: ARGV[5] token,
-- ARGV[6] time to live in ms, ARGV[7] metadata JSON or "", ARGV[8] member,
-- ARGV[9] "1" if it may pass over queued waiters
local holder = redis.call('GET', KEYS[1])
local marked = holder == ARGV[3] .. '\n'
if holder ~= ARGV[3] and not marked then
	return {'0'}
end
local over = '0'
if marked then
	over = '1'
end
if ARGV[5] and (not marked or ARGV[9] == '1') then
	redis.call('DEL', KEYS[3])
	return {'2', ARGV[5], string.format('%.0f', grant(ARGV[5], ARGV[6], ARGV[7], ARGV[8])), over}
end
redis.call('DEL', KEYS[1], KEYS[3])
if not marked then
	return {'1'}
end
local now, t = clockMs()
local first = passOn(now, t, ARGV[4])
if not first then
	return {'1'}
end
local _, ttl, token = parseMember(first)
local meta
if first == ARGV[8] then
	meta = ARGV[7]
end
return {'2', token, string.format('%.0f', grant(token, ttl, meta, first, t)), '0'}
