// Package redisstore keeps the records of an idem.Keeper in Redis (one node,
// Sentinel or Cluster through a go-redis UniversalClient).
//
// A record is one hash, prefix+key, with the request's SHA-256, the result,
// the failed flag and the fence of the attempt that wrote it; the hash
// expires (PEXPIRE) when its retention ends, by the server's clock. A read is
// one HMGET; a write is one script that refuses to replace a live record.
// Nothing else stays in Redis: every hash expires. Without AOF a restarted
// Redis forgets its records, and a retried request then runs again.
//
// Every request is bounded by WithRequestTimeout (default 5s) and the
// caller's context; dial timeouts are those of the client passed to New.
package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/idem"
	"github.com/distlock/distlock/internal/storeopt"
)

var (
	//go:embed put.lua
	putLua    string
	putScript = redis.NewScript(putLua)
)

// DefaultPrefix is prefixed to every key unless WithPrefix says otherwise.
const DefaultPrefix = "idem:"

// DefaultRequestTimeout bounds each request unless WithRequestTimeout says
// otherwise.
const DefaultRequestTimeout = storeopt.DefaultRequestTimeout

// Store is an idem.Store in Redis.
type Store struct {
	c       redis.UniversalClient
	prefix  string
	timeout time.Duration
}

var _ idem.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*storeopt.Config)

// WithPrefix sets the prefix of the records' keys. The default is
// DefaultPrefix.
func WithPrefix(p string) Option { return func(c *storeopt.Config) { c.Prefix = p } }

// WithRequestTimeout bounds each request. The default is
// DefaultRequestTimeout; it must be positive.
func WithRequestTimeout(d time.Duration) Option { return func(c *storeopt.Config) { c.Timeout = d } }

// New returns a store over client, which stays the caller's to close.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("redisstore: %w: client is nil", distlock.ErrInvalidOption)
	}
	cfg, err := storeopt.Apply("redisstore", storeopt.Config{Prefix: DefaultPrefix, Timeout: DefaultRequestTimeout}, opts)
	if err != nil {
		return nil, err
	}
	return &Store{c: client, prefix: cfg.Prefix, timeout: cfg.Timeout}, nil
}

// Get reads key's record in one request.
func (s *Store) Get(ctx context.Context, key string) (idem.Record, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	r, err := s.c.HMGet(ctx, s.prefix+key, "h", "v", "x", "n").Result()
	if err != nil {
		return idem.Record{}, false, fmt.Errorf("redisstore: get %q: %w", key, err)
	}
	h, ok1 := r[0].(string)
	v, ok2 := r[1].(string)
	x, _ := r[2].(string)
	n, _ := r[3].(string)
	if !ok1 || !ok2 {
		return idem.Record{}, false, nil
	}
	fence, err := strconv.ParseUint(n, 10, 64)
	if err == nil && len(h) != len(idem.Record{}.Hash) {
		err = errors.New("request hash of " + strconv.Itoa(len(h)) + " bytes")
	}
	if err != nil {
		return idem.Record{}, false, fmt.Errorf("redisstore: get %q: malformed record: %w", key, err)
	}
	rec := idem.Record{Value: []byte(v), Failed: x == "1", Fence: fence}
	copy(rec.Hash[:], h)
	return rec, true, nil
}

// Put records r unless a live record is there.
func (s *Store) Put(ctx context.Context, key string, r idem.Record, keep time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	failed := "0"
	if r.Failed {
		failed = "1"
	}
	n, err := putScript.Run(ctx, s.c, []string{s.prefix + key}, r.Hash[:], r.Value, failed,
		strconv.FormatUint(r.Fence, 10), max(keep.Milliseconds(), 1)).Int64()
	if err != nil {
		return false, fmt.Errorf("redisstore: put %q: %w", key, err)
	}
	return n == 1, nil
}
