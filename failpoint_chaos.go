//go:build chaos

package distlock

import "sync"

// Failpoint names, the points of the client where SetFailpoint can act.
const (
	// FailpointAcquireSent is after an acquire request was sent and its
	// reply read, before the client looks at the reply.
	FailpointAcquireSent = "acquire-sent"
	// FailpointRenew is before the watchdog sends a renewal.
	FailpointRenew = "renew"
)

var failpoints sync.Map // name -> func(key string)

// SetFailpoint makes f run at the failpoint name, with the lock's key, until
// it is set to nil. It exists only in builds with the chaos tag, for the
// chaos suite: f may block to stand for a pause or a slow reply at exactly
// that point.
func SetFailpoint(name string, f func(key string)) {
	if f == nil {
		failpoints.Delete(name)
		return
	}
	failpoints.Store(name, f)
}

func failpoint(name, key string) {
	if f, ok := failpoints.Load(name); ok {
		f.(func(string))(key)
	}
}
