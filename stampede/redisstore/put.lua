-- KEYS[1]: the entry's hash. ARGV: value, fence, fresh ms, stale ms past fresh.
-- Writes unless a live entry holds a fence at least ARGV[2]; the hash expires
-- when its stale bound ends, by the server's clock.
local f = redis.call('HGET', KEYS[1], 'f')
if f and tonumber(f) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'f', ARGV[2], 'g', ARGV[4])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]))
return 1
