-- KEYS[1]: the entry's hash. Returns value, fence, stale ms past fresh, and
-- the ms the hash has left (-2 if there is none), in one atomic read.
local e = redis.call('HMGET', KEYS[1], 'v', 'f', 'g')
return {e[1], e[2], e[3], redis.call('PTTL', KEYS[1])}
