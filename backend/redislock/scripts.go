package redislock

import _ "embed"

// script names one of the backend's Lua scripts; adapters compile each once.
type script int

const (
	scriptAcquire script = iota
	scriptRenew
	scriptRelease
	scriptInspect
	numScripts
)

var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed renew.lua
	renewLua string
	//go:embed release.lua
	releaseLua string
	//go:embed inspect.lua
	inspectLua string
)

// scriptSources holds each script's source, indexed by script.
var scriptSources = [numScripts]string{acquireLua, renewLua, releaseLua, inspectLua}
