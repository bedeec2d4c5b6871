-- KEYS[1]: the entry's hash. ARGV: value, fence, ms until the stale bound,
-- ms of the stale window (the value is fresh while more than that is left).
-- Writes unless a live entry holds a fence at least ARGV[2]; the hash expires
-- when its stale bound ends, by the server's clock.
local f = redis.call('HGET', KEYS[1], 'f')
if f and tonumber(f) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'f', ARGV[2], 'g', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
