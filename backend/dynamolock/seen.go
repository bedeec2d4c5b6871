package dynamolock

import (
	"sync"
	"time"
)

// sightings remembers, per key, the record version a backend last saw
// holding the key, with its lease and the moment it was first seen. A key
// may be taken over from a holder only once the same version has been seen
// for a full lease by this clock: the holder's own validity, counted from
// before it wrote that version, ends first as long as the two clocks run at
// about the same rate, whatever time of day they show.
type sightings struct {
	mu      sync.Mutex
	byKey   map[string]sighting
	pruneAt int // size at which stale sightings are dropped
}

type sighting struct {
	version string
	lease   time.Duration
	first   time.Time // when the reply that showed version arrived
	last    time.Time // when a reply last showed it
}

// minPrune is the size below which sightings are never pruned.
const minPrune = 1024

// saw records that a reply received at now showed version holding key with
// lease, and returns when this backend first saw that version.
func (s *sightings) saw(key, version string, lease time.Duration, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey == nil {
		s.byKey, s.pruneAt = make(map[string]sighting), minPrune
	}
	c, ok := s.byKey[key]
	if !ok || c.version != version {
		c = sighting{version: version, lease: lease, first: now}
	}
	c.last = now
	s.byKey[key] = c
	if len(s.byKey) >= s.pruneAt {
		s.prune(now)
	}
	return c.first
}

// prune drops the sightings of keys nobody tried for a lease and a minute:
// forgetting one only makes the next takeover of that key wait a full lease
// again. It runs each time the map doubles, so its cost per sighting is
// constant.
func (s *sightings) prune(now time.Time) {
	for k, c := range s.byKey {
		if now.Sub(c.last) > c.lease+time.Minute {
			delete(s.byKey, k)
		}
	}
	s.pruneAt = max(minPrune, 2*len(s.byKey))
}

// expired returns the version of key that this backend has seen unchanged
// for at least its lease by now, if any.
func (s *sightings) expired(key string, now time.Time) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.byKey[key]
	if !ok || now.Sub(c.first) < c.lease {
		return "", false
	}
	return c.version, true
}

// left returns how much of version's lease is left by this backend's view:
// the lease less the time it has seen that version, or the whole lease if it
// has not seen it.
func (s *sightings) left(key, version string, lease time.Duration, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.byKey[key]
	if !ok || c.version != version {
		return lease
	}
	return max(lease-now.Sub(c.first), 0)
}

// forget drops the sighting of key, once this backend was granted it.
func (s *sightings) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byKey, key)
}
