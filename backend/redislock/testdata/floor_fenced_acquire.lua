-- Takes KEYS[1] for ARGV[1] for ARGV[2] ms and returns its fence, or 0 if the
-- key is held: the least an acquire needs whose fence never goes back, even
-- when Redis loses the counter KEYS[2]. The fence is max(last + 1, server
-- time in µs).
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
local fence = redis.call('INCR', KEYS[2])
if fence < now then
	redis.call('SET', KEYS[2], now)
	return now
end
return fence
