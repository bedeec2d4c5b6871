package redislock

import (
	_ "embed"
	"strings"
)

// script names one of the backend's Lua scripts; adapters compile each once.
type script int

const (
	scriptAcquire script = iota
	scriptRenew
	scriptRelease
	scriptReleaseWatched
	scriptInspect
	scriptForceRelease
	scriptRequestRelease
	scriptRequested
	scriptWait
	scriptLeave
	scriptWatch
	scriptAcquireAll
	numScripts
)

var (
	//go:embed counter.lua
	counterLua string
	//go:embed queue.lua
	queueLua string
	//go:embed take.lua
	takeLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed acquire_all.lua
	acquireAllLua string
	//go:embed renew.lua
	renewLua string
	//go:embed release.lua
	releaseLua string
	//go:embed inspect.lua
	inspectLua string
	//go:embed forcerelease.lua
	forceReleaseLua string
	//go:embed request.lua
	requestLua string
	//go:embed requested.lua
	requestedLua string
	//go:embed wait.lua
	waitLua string
	//go:embed leave.lua
	leaveLua string
	//go:embed watchers.lua
	watchersLua string
	//go:embed watch.lua
	watchLua string
)

// scriptSources holds each script's source, indexed by script. The scripts
// that take a key take take.lua; those that write the fence counter take
// counter.lua, which says how long the
// counter lives and how it is written; those that use the waiters' queue
// take queue.lua, which says what the queue holds, where they say
// --[[queue.lua]]; those that free a key take watchers.lua, to wake its
// watchers. The release script wakes them on its fast path, where it says
// --[[wake]], only as scriptReleaseWatched (WithWatchedReleases). Watch
// scripts serve semaphores and read-write locks too.
var scriptSources = [numScripts]string{
	scriptAcquire:        counterLua + takeLua + acquireLua,
	scriptRenew:          counterLua + renewLua,
	scriptRelease:        releaseSource(false),
	scriptReleaseWatched: releaseSource(true),
	scriptInspect:        inspectLua,
	scriptForceRelease:   counterLua + watchersLua + withQueue(forceReleaseLua, ""),
	scriptRequestRelease: requestLua,
	scriptRequested:      requestedLua,
	scriptWait:           counterLua + withQueue(waitLua, ""),
	scriptLeave:          counterLua + withQueue(leaveLua, ""),
	scriptWatch:          watchLua,
	scriptAcquireAll:     counterLua + takeLua + acquireAllLua,
}

// releaseSource is release.lua as scriptRelease, or, watched, with the
// watchers woken on its fast path, as scriptReleaseWatched. An uncontended
// release needs neither counter.lua nor queue.lua, nor watchers.lua unless
// it wakes them.
func releaseSource(watched bool) string {
	if !watched {
		return withQueue(releaseLua, watchersLua+counterLua)
	}
	if strings.Count(releaseLua, wakeMarker) != 1 {
		panic("redislock: the release script must say " + wakeMarker + " once")
	}
	return watchersLua + withQueue(strings.Replace(releaseLua, wakeMarker, wakeLine, 1), counterLua)
}

// withQueue puts lib and queue.lua where src says --[[queue.lua]]. Lua
// makes a library's functions anew on every run of a script, so they go
// after its fast path.
func withQueue(src, lib string) string {
	if strings.Count(src, queueMarker) != 1 {
		panic("redislock: a script that uses the queue must say " + queueMarker + " once")
	}
	return strings.Replace(src, queueMarker, lib+queueLua, 1)
}

const queueMarker = "--[[queue.lua]]"

// wakeMarker is where the release script's fast path wakes the watchers,
// with wakeLine, in scriptReleaseWatched.
const (
	wakeMarker = "--[[wake]]"
	wakeLine   = "wakeWatchers(KEYS[7], ARGV[1])"
)
