-- Prepended to acquire.lua and renew.lua: how long the fence counter lives.
-- The counter outlives the lease of its last grant or renewal by a minute
-- (ms), and outlives the server's clock reaching its value when it is ahead
-- (a clock stepped back): only once both have passed can the next fence come
-- from the clock alone and still be above every earlier one. Redis 7.0, the
-- first with redis.REDIS_VERSION_NUM, sets and extends it in one call each.
local counterLinger = 60000
