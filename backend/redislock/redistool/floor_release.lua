-- Deletes KEYS[1] if it holds ARGV[1]: the least a safe release needs.
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0
