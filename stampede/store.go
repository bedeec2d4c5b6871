package stampede

import (
	"bytes"
	"context"
	"sync"
	"time"
)

// Entry is a cached value with its freshness and the fence it was written
// under.
type Entry struct {
	// Value is what load returned.
	Value []byte
	// FreshUntil ends the time the value is served as a hit.
	FreshUntil time.Time
	// StaleUntil ends the time the value may be served stale while one
	// caller refreshes it; it is never before FreshUntil. Past it the entry
	// is dead: callers wait for a fresh value instead.
	StaleUntil time.Time
	// Fence is the fence of the rebuild lock under which the value was
	// written.
	Fence uint64
}

// Store keeps a Cache's entries. Implementations must be safe for
// concurrent use. The Redis implementation is package redisstore;
// MemoryStore serves tests and single-process use.
type Store interface {
	// Get returns key's entry and true, or false if there is none. It may
	// return an entry past its StaleUntil or drop it.
	Get(ctx context.Context, key string) (Entry, bool, error)
	// Put stores e under key and reports true, unless the store holds a
	// live entry for key (StaleUntil ahead) whose Fence is at least e.Fence:
	// then it changes nothing and reports false. The check and the write
	// are one atomic step, so a late write by a rebuilder that lost its lock
	// cannot overwrite a value written under a later grant.
	Put(ctx context.Context, key string, e Entry) (bool, error)
}

// MemoryStore is a Store in the memory of one process. It drops an entry
// past its StaleUntil when it is read, and sweeps dead entries whenever the
// number of entries has doubled since the last sweep. The zero value is not
// usable; call NewMemoryStore.
type MemoryStore struct {
	mu    sync.Mutex
	m     map[string]Entry
	sweep int // sweep again when len(m) reaches this
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{m: make(map[string]Entry), sweep: 64}
}

// Get returns a copy of key's entry, if it is live.
func (s *MemoryStore) Get(ctx context.Context, key string) (Entry, bool, error) {
	if err := ctx.Err(); err != nil {
		return Entry{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok {
		return Entry{}, false, nil
	}
	if !time.Now().Before(e.StaleUntil) {
		delete(s.m, key)
		return Entry{}, false, nil
	}
	e.Value = bytes.Clone(e.Value)
	return e, true, nil
}

// Put stores a copy of e unless a live entry with a fence at least e.Fence
// is there.
func (s *MemoryStore) Put(ctx context.Context, key string, e Entry) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.m[key]; ok && now.Before(old.StaleUntil) && old.Fence >= e.Fence {
		return false, nil
	}
	e.Value = bytes.Clone(e.Value)
	s.m[key] = e
	if len(s.m) >= s.sweep {
		for k, old := range s.m {
			if !now.Before(old.StaleUntil) {
				delete(s.m, k)
			}
		}
		s.sweep = max(64, 2*len(s.m))
	}
	return true, nil
}
