-- Reads a key's last request to release (request.lua): {"<token> <reason>"},
-- or {""} if there is none.
-- KEYS[1] the request
return {redis.call('GET', KEYS[1]) or ''}
