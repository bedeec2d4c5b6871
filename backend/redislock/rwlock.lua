-- Prepended, after counter.lua, watchers.lua and semaphore.lua, to every
-- read-write lock script. A read-write lock's keys share the hash tag of its
-- name (see rwlock.go), in the places of a semaphore's, so semaphore.lua's
-- dropExpired and keepPermits, and its renew and release scripts, serve it
-- unchanged:
-- KEYS[1] holds: the holders' tokens, scored by the server time (ms) at
--         which their hold expires; all live holds are of one mode,
-- KEYS[2] holders: by token, "<mode> <fence> <metadata JSON>" (mode
--         "shared" or "exclusive", metadata may be empty),
-- KEYS[3] intents: the waiting writers' intents, scored by the server time
--         (ms) at which they lapse,
-- KEYS[4] fence counter (counter.lua), one for both modes,
-- KEYS[5] watchers, as a semaphore's.
-- A hold or intent whose expiry is not after now has expired.

-- parseHold splits a holder's entry into mode, fence and metadata.
local function parseHold(v)
	return string.match(v or '', '^(%S*) (%S*) ?(.*)$')
end
