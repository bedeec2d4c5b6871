-- Takes a set of keys, each for its own token, all or none: one attempt
-- per key as acquire.lua makes it (take.lua), once no key of the set is
-- held by another token.
-- KEYS: each key's lock, fence counter and metadata names, in turn
-- ARGV: each key's token, time to live in ms and metadata JSON or "", in
-- turn
-- Returns the keys' fences in the set's order, or {"0", i} if the i-th key
-- (from 1) is held by another token, and then nothing was taken. Fences
-- are strings: Lua would send a large number as 1.7e+15.
local n = #KEYS / 3
for i = 1, n do
	local holder, token = redis.call('GET', KEYS[3 * i - 2]), ARGV[3 * i - 2]
	if holder and holder ~= token and holder ~= token .. '\n' then
		return {'0', tostring(i)}
	end
end
local fences = {}
for i = 1, n do
	fences[i] = string.format('%.0f', take(KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]))
end
return fences
