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
	numScripts
)

var (
	//go:embed counter.lua
	counterLua string
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
)

// scriptSources holds each script's source, indexed by script. The scripts
// that write the fence counter start with counter.lua, which says how long
// the counter lives.
var scriptSources = [numScripts]string{
	counterLua + acquireLua,
	counterLua + renewLua,
	releaseLua,
	inspectLua,
	forceReleaseLua,
}
