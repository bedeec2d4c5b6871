package stampede_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	_ "github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/internal/childproc"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/stampede"
	"github.com/distlock/distlock/stampede/redisstore"
)

func TestMain(m *testing.M) {
	if code, ok := childproc.Main(childEnv, childJob.run); ok { // a replica process of a test
		os.Exit(code)
	}
	redis.SetLogger(quietLogger{}) // go-redis logs every failed dial of TestUnreachableStore
	goleak.VerifyTestMain(m)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// bound is the most any step of a test may take before it is a failure.
const bound = 20 * time.Second

// env is two replicas' view of one deployment: a lock client each over one
// lock store, and one cache store.
type env struct {
	name    string
	clients [2]*distlock.Client
	store   stampede.Store
	addr    string // Redis's, "" for memory
}

// envs starts every deployment the cache is tested on.
func envs(t *testing.T) []env {
	ctx := context.Background()
	open := func(url string) *distlock.Client {
		c, err := distlock.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	mem := "mem://" + t.Name()
	out := []env{{name: "mem", clients: [2]*distlock.Client{open(mem), open(mem)}, store: stampede.NewMemoryStore()}}
	if testing.Short() {
		return out
	}
	rds := testserver.Redis(t)
	url := "redis://" + rds.Addr()
	return append(out, env{name: "redis", clients: [2]*distlock.Client{open(url), open(url)},
		store: newRedisStore(t, rds.Addr()), addr: rds.Addr()})
}

func newRedisStore(t testing.TB, addr string) *redisstore.Store {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	s, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newCache(t testing.TB, c *distlock.Client, s stampede.Store, opts ...stampede.Option) *stampede.Cache {
	t.Helper()
	cache, err := stampede.New(c, s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	return cache
}

// recv waits for one value from ch, within bound.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(bound):
		t.Fatalf("no %s within %v", what, bound)
		panic("unreachable")
	}
}

type result struct {
	v   string
	err error
}

// 64 concurrent misses over two replicas run load once, and every caller
// gets its value; those that lost the race wait for it.
func TestConcurrentMissesLoadOnce(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			caches := [2]*stampede.Cache{newCache(t, e.clients[0], e.store), newCache(t, e.clients[1], e.store)}
			const n = 64
			var loads atomic.Int32
			gate := make(chan struct{})
			load := func(ctx context.Context) ([]byte, error) {
				k := loads.Add(1)
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return []byte("v" + strconv.Itoa(int(k))), nil
			}
			started, results := make(chan struct{}, n), make(chan result, n)
			for i := range n {
				go func() {
					started <- struct{}{}
					v, err := caches[i%2].Get(context.Background(), "hot", load)
					results <- result{string(v), err}
				}()
			}
			for range n {
				recv(t, started, "start")
			}
			close(gate)
			for range n {
				r := recv(t, results, "result")
				if r.err != nil || r.v != "v1" {
					t.Errorf("Get = %q, %v; want v1", r.v, r.err)
				}
			}
			if got := loads.Load(); got != 1 {
				t.Errorf("%d loads; want 1", got)
			}
			s0, s1 := caches[0].Stats(), caches[1].Stats()
			if s0.Loads+s1.Loads != 1 || s0.Hits+s1.Hits+s0.Misses+s1.Misses != n {
				t.Errorf("stats %+v, %+v: want 1 load and %d calls", s0, s1, n)
			}
		})
	}
}

// putStale writes value as a stale entry with a stale window of window left.
func putStale(t *testing.T, s stampede.Store, key, value string, window time.Duration) {
	t.Helper()
	now := time.Now()
	ok, err := s.Put(context.Background(), key, stampede.Entry{Value: []byte(value),
		FreshUntil: now.Add(-time.Second), StaleUntil: now.Add(window)})
	if err != nil || !ok {
		t.Fatalf("Put = %v, %v", ok, err)
	}
}

// waitFor polls s until key holds want, within bound, and returns the entry.
func waitFor(t *testing.T, s stampede.Store, key, want string) stampede.Entry {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	timeout := time.After(bound)
	for {
		e, ok, err := s.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if ok && string(e.Value) == want {
			return e
		}
		select {
		case <-tick.C:
		case <-timeout:
			t.Fatalf("store has %q for %q after %v; want %q", e.Value, key, bound, want)
		}
	}
}

// With a stale value present, every caller returns it while the one load
// is still blocked; the refresh then writes the new value.
func TestStaleServedWithoutWaiting(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			opts := []stampede.Option{stampede.WithStale(time.Hour)}
			caches := [2]*stampede.Cache{newCache(t, e.clients[0], e.store, opts...), newCache(t, e.clients[1], e.store, opts...)}
			putStale(t, e.store, "stale", "old", time.Hour)
			var loads atomic.Int32
			gate, loading := make(chan struct{}), make(chan struct{}, 64)
			load := func(ctx context.Context) ([]byte, error) {
				loads.Add(1)
				loading <- struct{}{}
				select {
				case <-gate:
					return []byte("new"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			const n = 16
			results := make(chan result, n)
			for i := range n {
				go func() {
					v, err := caches[i%2].Get(context.Background(), "stale", load)
					results <- result{string(v), err}
				}()
			}
			for range n { // all before the gate opens: nobody waited for the load
				if r := recv(t, results, "result"); r.err != nil || r.v != "old" {
					t.Errorf("Get = %q, %v; want old", r.v, r.err)
				}
			}
			recv(t, loading, "load")
			close(gate)
			got := waitFor(t, e.store, "stale", "new")
			if !time.Now().Before(got.FreshUntil) {
				t.Errorf("refreshed entry fresh until %v; want fresh", got.FreshUntil)
			}
			if got := loads.Load(); got != 1 {
				t.Errorf("%d loads; want 1", got)
			}
			if s := caches[0].Stats().StaleServed + caches[1].Stats().StaleServed; s != n {
				t.Errorf("%d stale serves; want %d", s, n)
			}
		})
	}
}

// A failing refresh keeps the stale value, which is still served, and the
// error goes to OnError; a failing inline load returns its error to its
// caller and leaves the store alone.
func TestFailingLoadKeepsStale(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			errBoom := errors.New("source down")
			reported := make(chan error, 4)
			onErr := stampede.OnError(func(_ string, err error) { reported <- err })
			cache := newCache(t, e.clients[0], e.store, stampede.WithStale(time.Hour), onErr)
			putStale(t, e.store, "flaky", "old", time.Hour)
			fail := func(context.Context) ([]byte, error) { return nil, errBoom }
			if v, err := cache.Get(context.Background(), "flaky", fail); err != nil || string(v) != "old" {
				t.Fatalf("Get = %q, %v; want old", v, err)
			}
			if err := recv(t, reported, "reported error"); !errors.Is(err, errBoom) {
				t.Errorf("OnError got %v; want %v", err, errBoom)
			}
			if v, err := cache.Get(context.Background(), "flaky", fail); err != nil || string(v) != "old" {
				t.Errorf("Get after the failed refresh = %q, %v; want old", v, err)
			}
			cache.Close()
			if s := cache.Stats(); s.Loads != s.LoadFailures || s.Loads == 0 {
				t.Errorf("stats %+v: want every load failed", s)
			}

			inline := newCache(t, e.clients[1], e.store)
			if _, err := inline.Get(context.Background(), "missing", fail); !errors.Is(err, errBoom) {
				t.Errorf("inline failing load: %v; want %v", err, errBoom)
			}
			panicky := func(context.Context) ([]byte, error) { panic("bad row") }
			if _, err := inline.Get(context.Background(), "missing", panicky); !errors.Is(err, stampede.ErrLoadPanicked) {
				t.Errorf("panicking load: %v; want ErrLoadPanicked", err)
			}
			if _, ok, err := e.store.Get(context.Background(), "missing"); ok || err != nil {
				t.Errorf("failed loads wrote an entry: %v, %v", ok, err)
			}
		})
	}
}

// A value past its stale bound is not served: callers wait for the rebuild
// lock instead (here held by someone else, so the wait ends unacquired),
// while a value within the bound is served at once under the same lock.
func TestStaleBoundHonoured(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			cache := newCache(t, e.clients[0], e.store, stampede.WithStale(time.Hour), stampede.WithWait(100*time.Millisecond))
			for _, k := range []string{"bounded", "dead"} {
				l, err := e.clients[1].Lock(context.Background(), stampede.KeyPrefix+k)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(context.Background())
			}
			loadCalled := func(context.Context) ([]byte, error) { return nil, errors.New("load must not run") }

			putStale(t, e.store, "bounded", "within", time.Hour)
			if v, err := cache.Get(context.Background(), "bounded", loadCalled); err != nil || string(v) != "within" {
				t.Fatalf("within the bound: Get = %q, %v; want within", v, err)
			}
			now := time.Now() // a store may keep a dead entry (memory) or not (Redis)
			if _, err := e.store.Put(context.Background(), "dead", stampede.Entry{Value: []byte("dead"),
				FreshUntil: now.Add(-time.Hour), StaleUntil: now.Add(-time.Millisecond)}); err != nil {
				t.Fatal(err)
			}
			v, err := cache.Get(context.Background(), "dead", loadCalled)
			if !errors.Is(err, distlock.ErrNotAcquired) {
				t.Errorf("past the bound: Get = %q, %v; want a wait that ends with ErrNotAcquired", v, err)
			}
			if s := cache.Stats(); s.Waits != 1 || s.Loads != 0 {
				t.Errorf("stats %+v: want one wait and no load", s)
			}
		})
	}
}

// A rebuilder whose lock was taken from it (force released) cannot overwrite
// the value written under the later grant: the store refuses the lower fence.
func TestLostRebuilderCannotOverwrite(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			slow := newCache(t, e.clients[0], e.store)
			fast := newCache(t, e.clients[1], e.store)
			loading, gate := make(chan struct{}, 1), make(chan struct{})
			done := make(chan result, 1)
			go func() {
				v, err := slow.Get(context.Background(), "contested", func(ctx context.Context) ([]byte, error) {
					loading <- struct{}{}
					select {
					case <-gate:
					case <-ctx.Done():
					}
					return []byte("late"), nil
				})
				done <- result{string(v), err}
			}()
			recv(t, loading, "slow load")
			if _, err := e.clients[1].ForceRelease(context.Background(), stampede.KeyPrefix+"contested", "test: holder stuck"); err != nil {
				t.Fatal(err)
			}
			v, err := fast.Get(context.Background(), "contested", func(context.Context) ([]byte, error) { return []byte("newer"), nil })
			if err != nil || string(v) != "newer" {
				t.Fatalf("Get = %q, %v; want newer", v, err)
			}
			close(gate)
			if r := recv(t, done, "slow result"); r.err != nil || r.v != "late" {
				t.Errorf("slow Get = %q, %v; want its own load's value", r.v, r.err)
			}
			if got, _, _ := e.store.Get(context.Background(), "contested"); string(got.Value) != "newer" {
				t.Errorf("store has %q; want newer: a lost rebuilder overwrote it", got.Value)
			}
			if s := slow.Stats(); s.Refused != 1 {
				t.Errorf("slow stats %+v: want one refused write", s)
			}
		})
	}
}

func TestStoreRefusesLowerFence(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Now()
			put := func(v string, fence uint64) bool {
				ok, err := e.store.Put(ctx, "fenced", stampede.Entry{Value: []byte(v), FreshUntil: now.Add(time.Hour),
					StaleUntil: now.Add(2 * time.Hour), Fence: fence})
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}
			if !put("a", 5) || put("b", 4) || put("c", 5) || !put("d", 6) {
				t.Error("want fences 5 and 6 written, 4 and 5 again refused")
			}
			// Fences past 2^53, where a float64 no longer tells neighbours apart.
			const big = 1<<62 + 1
			if !put("e", big) || put("f", big-1) || !put("g", big+1) {
				t.Errorf("want fences %d and %d written, %d refused", uint64(big), uint64(big+1), uint64(big-1))
			}
			got, ok, err := e.store.Get(ctx, "fenced")
			if err != nil || !ok || string(got.Value) != "g" || got.Fence != big+1 {
				t.Errorf("Get = %+v, %v, %v; want g at fence %d", got, ok, err, uint64(big+1))
			}
			if d := got.StaleUntil.Sub(got.FreshUntil); d < time.Hour-time.Second || d > time.Hour+time.Second {
				t.Errorf("stale window %v; want 1h", d)
			}
		})
	}
}

func TestInvalidInput(t *testing.T) {
	c := distlock.New(memlock.New())
	defer c.Close()
	s := stampede.NewMemoryStore()
	for name, opts := range map[string][]stampede.Option{
		"ttl":          {stampede.WithTTL(0)},
		"stale":        {stampede.WithStale(-time.Second)},
		"wait":         {stampede.WithWait(0)},
		"load timeout": {stampede.WithLoadTimeout(-1)},
		"jitter":       {stampede.WithJitter(1)},
	} {
		if _, err := stampede.New(c, s, opts...); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: New = %v; want ErrInvalidOption", name, err)
		}
	}
	if _, err := stampede.New(nil, s); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("nil client: %v", err)
	}
	cache := newCache(t, c, s)
	ok := func(context.Context) ([]byte, error) { return []byte("x"), nil }
	if _, err := cache.Get(context.Background(), "k\x00", ok); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("control character: %v; want ErrInvalidKey", err)
	}
	if _, err := cache.Get(context.Background(), "k", nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("nil load: %v; want ErrInvalidOption", err)
	}
	cache.Close()
	if _, err := cache.Get(context.Background(), "k", ok); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("after Close: %v; want ErrClosed", err)
	}
	if _, err := redisstore.New(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("redisstore nil client: %v", err)
	}
}

// A waiter's wait is bounded by its context as well as WithWait.
func TestWaitHonoursContext(t *testing.T) {
	for _, e := range envs(t) {
		t.Run(e.name, func(t *testing.T) {
			cache := newCache(t, e.clients[0], e.store)
			l, err := e.clients[1].Lock(context.Background(), stampede.KeyPrefix+"held")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err = cache.Get(ctx, "held", func(context.Context) ([]byte, error) { return nil, fmt.Errorf("must not run") })
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Get = %v; want the context's deadline", err)
			}
		})
	}
}

// Callers in one process share a rebuild: one leaving (its ctx ends) does not
// end the load for the others, who get its value; when all have left, the
// load's context is cancelled.
func TestSharedRebuild(t *testing.T) {
	c := distlock.New(memlock.New())
	defer c.Close()
	cache := newCache(t, c, stampede.NewMemoryStore())
	loading, gate, cancelled := make(chan struct{}, 2), make(chan struct{}), make(chan struct{}, 2)
	load := func(ctx context.Context) ([]byte, error) {
		loading <- struct{}{}
		select {
		case <-gate:
			return []byte("shared"), nil
		case <-ctx.Done():
			cancelled <- struct{}{}
			return nil, ctx.Err()
		}
	}
	get := func(ctx context.Context, key string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			v, err := cache.Get(ctx, key, load)
			ch <- result{string(v), err}
		}()
		return ch
	}
	leaving, leave := context.WithCancel(context.Background())
	first := get(leaving, "k")
	recv(t, loading, "load")
	second := get(context.Background(), "k")
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(bound); cache.Stats().Joined == 0; { // the second has joined
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the second caller did not join the rebuild")
		}
	}
	leave()
	if r := recv(t, first, "first result"); !errors.Is(r.err, context.Canceled) {
		t.Errorf("leaving caller: %q, %v; want context.Canceled", r.v, r.err)
	}
	close(gate)
	if r := recv(t, second, "second result"); r.err != nil || r.v != "shared" {
		t.Errorf("second caller: %q, %v; want shared", r.v, r.err)
	}
	if s := cache.Stats(); s.Loads != 1 || s.Joined != 1 {
		t.Errorf("stats %+v: want one load, one joined", s)
	}

	gate = make(chan struct{}) // never opened
	alone, leaveAlone := context.WithCancel(context.Background())
	r := get(alone, "other")
	recv(t, loading, "second load")
	leaveAlone()
	recv(t, r, "result")
	recv(t, cancelled, "the load's cancellation once nobody waits")
}

// An unreachable Redis store fails promptly, naming the dial error.
func TestUnreachableStore(t *testing.T) {
	c := distlock.New(memlock.New())
	defer c.Close()
	cache := newCache(t, c, newRedisStore(t, fmt.Sprintf("%s:%d", testserver.Host, testserver.FreePort(t))))
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	_, err := cache.Get(ctx, "k", func(context.Context) ([]byte, error) { return []byte("v"), nil })
	if err == nil || !strings.Contains(err.Error(), "connection refused") || ctx.Err() != nil {
		t.Errorf("Get = %v; want a prompt dial error", err)
	}
}

// WithJitter shortens each TTL by up to its fraction; WithLoadTimeout ends a
// load that runs too long, and its caller gets the deadline.
func TestJitterAndLoadTimeout(t *testing.T) {
	c := distlock.New(memlock.New())
	defer c.Close()
	store := stampede.NewMemoryStore()
	cache := newCache(t, c, store, stampede.WithTTL(time.Hour), stampede.WithJitter(0.5),
		stampede.WithLoadTimeout(20*time.Millisecond))
	ok := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for i := range 20 {
		key := "j" + strconv.Itoa(i)
		before := time.Now()
		if _, err := cache.Get(context.Background(), key, ok); err != nil {
			t.Fatal(err)
		}
		e, _, _ := store.Get(context.Background(), key)
		if ttl := e.FreshUntil.Sub(before); ttl < 30*time.Minute || ttl > time.Hour+time.Second {
			t.Errorf("TTL %v; want within [30m, 1h]", ttl)
		}
	}
	slow := func(ctx context.Context) ([]byte, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(bound):
			return []byte("too late"), nil
		}
	}
	if _, err := cache.Get(context.Background(), "slow", slow); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow load: %v; want the load timeout's deadline", err)
	}
}

// Over Redis Cluster (locks and entries both), concurrent misses over two
// clients still load once, and the store still refuses a lower fence; each
// request names one key, so no cross-slot command is sent.
func TestRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real cluster")
	}
	cl := testserver.RedisCluster(t, 3)
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { rc.Close() })
	store, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	var caches [2]*stampede.Cache
	for i := range caches {
		c, err := distlock.Open(context.Background(), "redis-cluster://"+cl.Addrs()[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		caches[i] = newCache(t, c, store)
	}
	for k := range 8 { // keys over several slots
		key := "cluster-" + strconv.Itoa(k)
		var loads atomic.Int32
		load := func(context.Context) ([]byte, error) {
			loads.Add(1)
			return []byte(key), nil
		}
		results := make(chan result, 16)
		for i := range 16 {
			go func() {
				v, err := caches[i%2].Get(context.Background(), key, load)
				results <- result{string(v), err}
			}()
		}
		for range 16 {
			if r := recv(t, results, "result"); r.err != nil || r.v != key {
				t.Errorf("Get = %q, %v; want %q", r.v, r.err, key)
			}
		}
		if n := loads.Load(); n != 1 {
			t.Errorf("%s: %d loads; want 1", key, n)
		}
		now := time.Now()
		if ok, err := store.Put(context.Background(), key, stampede.Entry{Value: []byte("old"), FreshUntil: now.Add(time.Hour),
			StaleUntil: now.Add(time.Hour)}); ok || err != nil {
			t.Errorf("%s: Put with fence 0 = %v, %v; want refused", key, ok, err)
		}
	}
}
