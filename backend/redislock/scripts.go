package redislock

import _ "embed"

// script names one of the backend's Lua scripts; adapters compile each once.
type script int

const (
	scriptAcquire script = iota
	scriptRenew
	scriptRelease
	scriptInspect
	scriptForceRelease
	scriptWait
	scriptLeave
	numScripts
)

var (
	//go:embed counter.lua
	counterLua string
	//go:embed queue.lua
	queueLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed renew.lua
	renewLua string
	//go:embed release.lua
	releaseLua string
	//go:embed inspect.lua
	inspectLua string
	//go:embed forcerelease.lua
	forceReleaseLua string
	//go:embed wait.lua
	waitLua string
	//go:embed leave.lua
	leaveLua string
)

// scriptSources holds each script's source, indexed by script. The scripts
// that write the fence counter start with counter.lua, which says how long
// the counter lives and how it is written; those that use the waiters' queue
// go on with queue.lua, which says what the queue holds.
var scriptSources = [numScripts]string{
	scriptAcquire:      counterLua + acquireLua,
	scriptRenew:        counterLua + renewLua,
	scriptRelease:      counterLua + queueLua + releaseLua,
	scriptInspect:      inspectLua,
	scriptForceRelease: counterLua + queueLua + forceReleaseLua,
	scriptWait:         counterLua + queueLua + waitLua,
	scriptLeave:        counterLua + queueLua + leaveLua,
}
