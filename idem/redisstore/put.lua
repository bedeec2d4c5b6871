-- KEYS[1]: the record's hash. ARGV: request hash, value, failed (0/1), fence,
-- retention ms. Writes unless a live record is there (the hash expires with
-- its retention, by the server's clock): one result per key, whatever the
-- fences of attempts that ran at once.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'h', ARGV[1], 'v', ARGV[2], 'x', ARGV[3], 'n', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
