// Package redisstore keeps the entries of a stampede.Cache in Redis (one
// node, Sentinel or Cluster through a go-redis UniversalClient).
//
// An entry is one hash, prefix+key, with the value, the fence of the rebuild
// lock it was written under, and the length of its stale window; the hash
// expires (PEXPIRE) when its stale bound ends. Freshness is counted by the
// server's clock, so replicas with skewed clocks agree on it: a read returns
// the hash and its PTTL in one script, and the value is fresh while PTTL is
// over the stale window. A write is a script that refuses to replace a live
// entry whose fence is at least the writer's.
//
// Once a hash has expired its fence is gone with it, so a rebuilder that lost
// its lock and writes after the newer value's stale bound ended is not
// refused; the Cache checks its lock right before writing, which leaves only
// a pause between that check and the write. Nothing else stays in Redis:
// every hash expires.
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
	"github.com/distlock/distlock/internal/storeopt"
	"github.com/distlock/distlock/stampede"
)

var (
	//go:embed get.lua
	getLua string
	//go:embed put.lua
	putLua string

	getScript = redis.NewScript(getLua)
	putScript = redis.NewScript(putLua)
)

// DefaultPrefix is prefixed to every key unless WithPrefix says otherwise.
const DefaultPrefix = "stampede:"

// DefaultRequestTimeout bounds each request unless WithRequestTimeout says
// otherwise.
const DefaultRequestTimeout = storeopt.DefaultRequestTimeout

// Store is a stampede.Store in Redis.
type Store struct {
	c       redis.UniversalClient
	prefix  string
	timeout time.Duration
}

var _ stampede.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*storeopt.Config)

// WithPrefix sets the prefix of the entries' keys. The default is
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

// Get reads key's entry and its remaining time in one request.
func (s *Store) Get(ctx context.Context, key string) (stampede.Entry, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	sent := time.Now()
	r, err := getScript.Run(ctx, s.c, []string{s.prefix + key}).Slice()
	if err != nil {
		return stampede.Entry{}, false, fmt.Errorf("redisstore: get %q: %w", key, err)
	}
	if len(r) != 4 {
		return stampede.Entry{}, false, fmt.Errorf("redisstore: get %q: reply of %d elements", key, len(r))
	}
	pttl, _ := r[3].(int64)
	value, ok := r[0].(string)
	if pttl <= 0 || !ok {
		return stampede.Entry{}, false, nil // none, expiring now, or not an entry of ours
	}
	fs, _ := r[1].(string)
	gs, _ := r[2].(string)
	fence, err1 := strconv.ParseUint(fs, 10, 64)
	gap, err2 := strconv.ParseInt(gs, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return stampede.Entry{}, false, fmt.Errorf("redisstore: get %q: malformed entry: %w", key, err)
	}
	staleUntil := sent.Add(time.Duration(pttl) * time.Millisecond)
	return stampede.Entry{
		Value:      []byte(value),
		FreshUntil: staleUntil.Add(-time.Duration(gap) * time.Millisecond),
		StaleUntil: staleUntil,
		Fence:      fence,
	}, true, nil
}

// Put writes e unless a live entry with a fence at least e.Fence is there,
// or e is past its StaleUntil already. The entry expires at e.StaleUntil,
// counted from now by the server's clock.
func (s *Store) Put(ctx context.Context, key string, e stampede.Entry) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ttl := time.Until(e.StaleUntil).Milliseconds()
	if ttl <= 0 {
		return false, nil // dead already: nothing to keep
	}
	gap := max(e.StaleUntil.Sub(e.FreshUntil).Milliseconds(), 0)
	n, err := putScript.Run(ctx, s.c, []string{s.prefix + key}, e.Value, strconv.FormatUint(e.Fence, 10), ttl, gap).Int64()
	if err != nil {
		return false, fmt.Errorf("redisstore: put %q: %w", key, err)
	}
	return n == 1, nil
}
