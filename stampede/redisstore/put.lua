-- KEYS[1]: the entry's hash. ARGV: value, fence (decimal, no leading zeros),
-- ms until the stale bound, ms of the stale window (the value is fresh while
-- more than that is left).
-- Writes unless a live entry holds a fence at least ARGV[2]; the hash expires
-- when its stale bound ends, by the server's clock. Fences are compared as
-- decimal strings, longer first, since Lua's numbers are doubles and lose
-- uint64 fences past 2^53.
local f, n = redis.call('HGET', KEYS[1], 'f'), ARGV[2]
if f and (#f > #n or (#f == #n and f >= n)) then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'f', n, 'g', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
