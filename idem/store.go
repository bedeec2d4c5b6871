package idem

import (
	"bytes"
	"context"
	"sync"
	"time"
)

// Record is a finished attempt's result, as a Store keeps it.
type Record struct {
	// Hash is the SHA-256 of the request.
	Hash [32]byte
	// Value is the result, or the value given to Fail.
	Value []byte
	// Failed marks a recorded failure.
	Failed bool
	// Fence is the fence of the attempt's lock.
	Fence uint64
}

// Store keeps finished results. Implementations must be safe for concurrent
// use. MemoryStore serves tests and single-process use; packages redisstore,
// pgstore and mysqlstore keep records in Redis, PostgreSQL and MySQL/MariaDB.
type Store interface {
	// Get returns key's record and true, or false if there is none or its
	// retention has ended.
	Get(ctx context.Context, key string) (Record, bool, error)
	// Put records r under key for keep and reports true, unless a live
	// record is there, whatever its fence: then it changes nothing and
	// reports false. The check and the write are one atomic step, so that
	// of attempts that ran at once (a lost lock lets them), only the first
	// to finish is recorded.
	Put(ctx context.Context, key string, r Record, keep time.Duration) (bool, error)
}

// MemoryStore is a Store in the memory of one process. It drops an expired
// record when it is read, and sweeps expired records whenever the number of
// records has doubled since the last sweep. The zero value is not usable;
// call NewMemoryStore.
type MemoryStore struct {
	mu    sync.Mutex
	m     map[string]memRecord
	sweep int // sweep again when len(m) reaches this
}

type memRecord struct {
	Record
	until time.Time
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{m: make(map[string]memRecord), sweep: 64}
}

// Get returns a copy of key's record, if it is live.
func (s *MemoryStore) Get(ctx context.Context, key string) (Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[key]
	if !ok {
		return Record{}, false, nil
	}
	if !time.Now().Before(r.until) {
		delete(s.m, key)
		return Record{}, false, nil
	}
	r.Value = bytes.Clone(r.Value)
	return r.Record, true, nil
}

// Put records a copy of r unless a live record is there.
func (s *MemoryStore) Put(ctx context.Context, key string, r Record, keep time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.m[key]; ok && now.Before(old.until) {
		return false, nil
	}
	r.Value = bytes.Clone(r.Value)
	s.m[key] = memRecord{Record: r, until: now.Add(keep)}
	if len(s.m) >= s.sweep {
		for k, old := range s.m {
			if !now.Before(old.until) {
				delete(s.m, k)
			}
		}
		s.sweep = max(64, 2*len(s.m))
	}
	return true, nil
}
