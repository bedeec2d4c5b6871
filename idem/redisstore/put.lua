-- KEYS[1]: the record's hash. ARGV: request hash, value, failed (0/1), fence,
-- retention ms. Writes unless a live record holds a fence at least ARGV[4];
-- the record expires after its retention, by the server's clock. Fences are
-- decimal uint64 without leading zeros, compared as strings (length first):
-- Lua's numbers are doubles, exact only up to 2^53.
local f = redis.call('HGET', KEYS[1], 'n')
if f and (#f > #ARGV[4] or (#f == #ARGV[4] and f >= ARGV[4])) then
  return 0
end
redis.call('HSET', KEYS[1], 'h', ARGV[1], 'v', ARGV[2], 'x', ARGV[3], 'n', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
