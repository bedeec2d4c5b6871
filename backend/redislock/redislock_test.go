package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/childproc"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
	"github.com/distlock/distlock/observe"
)

func TestMain(m *testing.M) {
	if code, ok := childproc.Main(childEnv, childJob.run); ok { // a client process of a test or benchmark
		os.Exit(code)
	}
	redis.SetLogger(quietLogger{}) // go-redis logs every Sentinel lookup
	goleak.VerifyTestMain(m,
		// rueidis's cluster client closes connections replaced by a topology
		// refresh after sleeping 5 s in this goroutine; Close does not stop it.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// ownedBackend closes the go-redis client a test built along with the
// backend, as Open's backends do, so that the suite's leak check sees no
// client goroutines left.
type ownedBackend struct {
	*redislock.Backend
	client redis.UniversalClient
}

func (o ownedBackend) Close() error { return errors.Join(o.Backend.Close(), o.client.Close()) }

// newGoRedis returns a backend on a new go-redis client that the backend's
// Close also closes.
func newGoRedis(t testing.TB, client redis.UniversalClient, opts ...redislock.Option) driver.Backend {
	t.Helper()
	b, err := redislock.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ownedBackend{b, client}
}

// openURL returns a backend from redislock.Open.
func openURL(t testing.TB, rawURL string, opts ...redislock.Option) *redislock.Backend {
	t.Helper()
	b, err := redislock.Open(context.Background(), rawURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lockName is the Redis name of a test key under the default prefix (test
// keys need no escaping).
func lockName(key string) string { return redislock.DefaultPrefix + "{" + key + "}" }

// rawCommand sends one command to whichever of addrs serves its key (the
// others answer MOVED in a Cluster).
func rawCommand(t testing.TB, addrs []string, args ...string) string {
	t.Helper()
	var err error
	for _, a := range addrs {
		var reply string
		reply, err = testserver.RedisCommand(context.Background(), a, args...)
		if err == nil {
			return reply
		}
		if !strings.HasPrefix(err.Error(), "MOVED") && !strings.HasPrefix(err.Error(), "READONLY") {
			break
		}
	}
	t.Fatalf("%v: %v", args, err)
	return ""
}

// deleteKey is the suite's DeleteKey hook: DEL of the lock name.
func deleteKey(addrs func() []string) func(testing.TB, string) {
	return func(t testing.TB, key string) { rawCommand(t, addrs(), "DEL", lockName(key)) }
}

// deleteWaiters is the suite's DeleteWaiters hook: DEL of the key's queue.
func deleteWaiters(addrs func() []string) func(testing.TB, string) {
	return func(t testing.TB, key string) {
		n := lockName(key)
		rawCommand(t, addrs(), "DEL", n+":q", n+":qt", n+":qm")
	}
}

func fixed(addrs ...string) func() []string { return func() []string { return addrs } }

// singleNode is the suite's harness for one redis-server at s, with
// backends from at (a backend reaching the server at addr).
func singleNode(s *testserver.Server, at func(t testing.TB, addr string) driver.Backend) locktest.Harness {
	return locktest.Harness{
		NewBackend:    func(t testing.TB) driver.Backend { return at(t, s.Addr()) },
		DeleteKey:     deleteKey(fixed(s.Addr())),
		DeleteWaiters: deleteWaiters(fixed(s.Addr())),
		StoreAddr:     s.Addr(),
		NewBackendAt:  at,
	}
}

func TestConformanceGoRedis(t *testing.T) {
	locktest.Run(t, singleNode(testserver.Redis(t), func(t testing.TB, addr string) driver.Backend {
		return newGoRedis(t, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	}))
}

func TestConformanceRueidis(t *testing.T) {
	locktest.Run(t, singleNode(testserver.Redis(t), func(t testing.TB, addr string) driver.Backend {
		return openURL(t, "redis://"+addr+"/0")
	}))
}

// TestConformanceCluster runs the part of the suite that a Redis Cluster
// can change (TestConformanceGoRedis and TestConformanceRueidis run the
// whole suite with the same code on one node).
func TestConformanceCluster(t *testing.T) {
	c := testserver.RedisCluster(t, 3)
	addrs := c.Addrs()
	t.Run("go-redis", func(t *testing.T) {
		locktest.RunTopology(t, locktest.Harness{
			NewBackend: func(t testing.TB) driver.Backend {
				return newGoRedis(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true}))
			},
			DeleteKey:     deleteKey(fixed(addrs...)),
			DeleteWaiters: deleteWaiters(fixed(addrs...)),
		})
	})
	t.Run("rueidis", func(t *testing.T) {
		// One client serves every backend of this run: rueidis's cluster client
		// closes connections it replaced 5 s after a topology refresh, in a
		// goroutine that Close does not stop, which the suite's leak check
		// would report. Each backend still has its own subscription connection.
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close)
		locktest.RunTopology(t, locktest.Harness{
			NewBackend: func(t testing.TB) driver.Backend {
				b, err := redislock.NewRueidis(client)
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			DeleteKey:     deleteKey(fixed(addrs...)),
			DeleteWaiters: deleteWaiters(fixed(addrs...)),
		})
	})
	url := "redis-cluster://" + addrs[0]
	t.Run("fifo", func(t *testing.T) {
		fifoAcrossClients(t, func(t testing.TB) driver.Backend { return openURL(t, url) }, fixed(addrs...))
	})
	t.Run("dead-waiter", func(t *testing.T) { deadWaiterProcess(t, url, fixed(addrs...)) })
	t.Run("subscription-per-master", func(t *testing.T) {
		for _, a := range []struct {
			name string
			new  func(t testing.TB) driver.Backend
		}{
			{"rueidis", func(t testing.TB) driver.Backend { return openURL(t, url) }},
			{"go-redis", func(t testing.TB) driver.Backend {
				return newGoRedis(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true}))
			}},
		} {
			t.Run(a.name, func(t *testing.T) { subscriptionPerMaster(t, a.new, addrs) })
		}
	})
	t.Run("special-keys", func(t *testing.T) { specialKeys(t, openURL(t, "redis-cluster://"+addrs[0])) })
	t.Run("loss-tracked", func(t *testing.T) {
		c := newClient(t, openURL(t, url))
		for i := range 4 { // keys on several masters
			lossTold(t, c, fmt.Sprintf("tracked-%d", i), 300*time.Millisecond, deleteKey(fixed(addrs...)), observe.LossDeleted)
		}
	})
	t.Run("force-release", func(t *testing.T) {
		forceRelease(t, func(t testing.TB) driver.Backend { return openURL(t, "redis-cluster://"+addrs[0]) }, fixed(addrs...))
	})
	t.Run("rw-downgrade", func(t *testing.T) {
		a, b := newClient(t, openURL(t, url)), newClient(t, openURL(t, url))
		for i := range 4 { // names on several masters
			clusterDowngrade(t, a, b, fmt.Sprintf("rw-downgrade-%d", i))
		}
	})
}

// clusterDowngrade downgrades a's write hold of name, which RunTopology's
// suite leaves out: b's reader joins it, b's writer stays out, and the hold
// keeps its fence.
func clusterDowngrade(t *testing.T, a, b *distlock.Client, name string) {
	t.Helper()
	ctx := testContext(t)
	ma, err := a.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Close()
	mb, err := b.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	w, err := ma.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ma.Downgrade(ctx, w); err != nil {
		t.Fatalf("%s: Downgrade: %v", name, err)
	}
	r, err := mb.TryRLock(ctx)
	if err != nil {
		t.Fatalf("%s: a reader after the downgrade: %v", name, err)
	}
	if _, err := mb.TryLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("%s: a writer beside the downgraded hold: %v, want ErrNotAcquired", name, err)
	}
	info, err := ma.Inspect(ctx)
	if err != nil || info.Writer || len(info.Held) != 2 || info.Held[0].Fence != w.Fence() {
		t.Fatalf("%s: Inspect after the downgrade: %+v, %v; want two readers, the first of fence %d", name, info, err, w.Fence())
	}
	for _, l := range []*distlock.Lock{w, r} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// subscriptionPerMaster has a waiter of one backend wait for a held key on a
// Cluster: the backend must listen on every master, one connection with its
// one channel each, so that a release's notice never crosses the cluster
// bus to reach it.
func subscriptionPerMaster(t *testing.T, newBackend func(testing.TB) driver.Backend, addrs []string) {
	ctx := testContext(t)
	key := "per-master/" + t.Name()
	held, err := newClient(t, newBackend(t)).Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newClient(t, newBackend(t))
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, key, distlock.WithWait(20*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	eventually(t, "one subscribed connection with two channels per backend on every master", func() error {
		for _, addr := range addrs {
			if subs := subscribers(t, addr); !slices.Equal(subs, []int{2, 2}) {
				return fmt.Errorf("%s: subscribed connections and their channel counts %v, want [2 2] (the holder's and the waiter's)", addr, subs)
			}
		}
		return nil
	})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// specialKeys locks keys with braces, backslashes and glob characters, which
// must still share one slot with their counters and list by exact prefix.
func specialKeys(t *testing.T, b *redislock.Backend) {
	ctx := testContext(t)
	c := distlock.New(b)
	defer c.Close()
	keys := []string{"}lead", "}lead}2", "a}b{c", `back\slash`, `back\]`, "star*[?]", "star*[?]x", "starry"}
	for _, k := range keys {
		l, err := c.TryLock(ctx, k, distlock.WithOwner("o-"+k))
		if err != nil {
			t.Fatalf("lock %q: %v", k, err)
		}
		defer l.Release(ctx)
		info, err := c.Inspect(ctx, k)
		if err != nil || !info.Held || info.Fence != l.Fence() || info.Meta.Owner != "o-"+k {
			t.Fatalf("inspect %q = %+v, %v; want held with fence %d", k, info, err, l.Fence())
		}
	}
	for prefix, want := range map[string][]string{
		"}lead":    {"}lead", "}lead}2"},
		"star*[?]": {"star*[?]", "star*[?]x"},
		`back\`:    {`back\]`, `back\slash`},
	} {
		infos, err := c.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, i := range infos {
			got = append(got, i.Key)
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
}

// TestConformanceSentinel runs the part of the suite that a Sentinel
// deployment can change, with each client library.
func TestConformanceSentinel(t *testing.T) {
	s := testserver.RedisSentinel(t)
	sentinels := s.SentinelAddrs()
	primary := func() []string { return []string{s.Primary().Addr()} }
	t.Run("go-redis", func(t *testing.T) {
		locktest.RunTopology(t, locktest.Harness{
			NewBackend: func(t testing.TB) driver.Backend {
				return newGoRedis(t, redis.NewFailoverClient(&redis.FailoverOptions{
					MasterName: testserver.SentinelMaster, SentinelAddrs: sentinels, ContextTimeoutEnabled: true}))
			},
			DeleteKey:     deleteKey(primary),
			DeleteWaiters: deleteWaiters(primary),
		})
	})
	t.Run("rueidis", func(t *testing.T) {
		url := "redis-sentinel://" + sentinels[0] + "/" + testserver.SentinelMaster + "?addr=" + sentinels[1] + "&addr=" + sentinels[2]
		locktest.RunTopology(t, locktest.Harness{
			NewBackend:    func(t testing.TB) driver.Backend { return openURL(t, url) },
			DeleteKey:     deleteKey(primary),
			DeleteWaiters: deleteWaiters(primary),
		})
		t.Run("force-release", func(t *testing.T) {
			forceRelease(t, func(t testing.TB) driver.Backend { return openURL(t, url) }, primary)
		})
		t.Run("fifo", func(t *testing.T) {
			fifoAcrossClients(t, func(t testing.TB) driver.Backend { return openURL(t, url) }, primary)
		})
		t.Run("dead-waiter", func(t *testing.T) { deadWaiterProcess(t, url, primary) })
	})
	t.Run("replica-ack", func(t *testing.T) {
		url := "redis-sentinel://" + sentinels[0] + "/" + testserver.SentinelMaster + "?replica_ack=1&replica_ack_timeout=" + ackTimeout.String()
		replicaAckGrants(t, map[string]*redislock.Backend{
			"rueidis": openURL(t, url),
			"go-redis": ackGoRedis(t, redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: testserver.SentinelMaster, SentinelAddrs: sentinels, ContextTimeoutEnabled: true})),
		}, s.Replica().Addr())
	})
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
