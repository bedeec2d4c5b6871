package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// ackTimeout is how long the replica acknowledgement tests let WAIT wait.
const ackTimeout = 200 * time.Millisecond

// primaryWithReplica starts a redis-server and a replica of it, and waits
// until the replica acknowledges a write. (The primary counts a replica
// online once it sent it the data set, which the replica may still be
// writing to disk and loading; it acknowledges nothing meanwhile.)
func primaryWithReplica(t testing.TB) (primary, replica *testserver.Server) {
	t.Helper()
	primary = testserver.Redis(t)
	replica = testserver.Redis(t, "--replicaof", testserver.Host, strconv.Itoa(primary.Port))
	awaitReplicaAck(t, primary.Addr(), "replica-probe")
	return primary, replica
}

// awaitReplicaAck waits until a replica of the server at addr acknowledges
// a write of key, which the server must serve.
func awaitReplicaAck(t testing.TB, addr, key string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := replicaAcks(c, key)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replica of %s acknowledges a write: %v", addr, err)
		}
	}
}

// replicaAcks writes key through c and checks that a replica acknowledges
// the write within 100ms (SET and WAIT pipelined on one connection).
func replicaAcks(c *redis.Client, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var wait *redis.Cmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "1", time.Minute)
		wait = p.Do(ctx, "WAIT", 1, 100)
		return nil
	})
	if err != nil {
		return err
	}
	if n, err := wait.Int64(); err != nil || n != 1 {
		return fmt.Errorf("WAIT 1 100: %d, %v", n, err)
	}
	return nil
}

// replicasOnline checks that the server at addr has n replicas online.
func replicasOnline(addr string, n int) error {
	info, err := testserver.RedisCommand(context.Background(), addr, "INFO", "replication")
	if err != nil {
		return err
	}
	if got := strings.Count(info, "state=online"); got != n {
		return errors.New("replicas online: " + strconv.Itoa(got) + ", want " + strconv.Itoa(n))
	}
	return nil
}

// ackAdapters are the backends with WithReplicaAck(1, ackTimeout), one per
// client library, on a single primary at addr.
var ackAdapters = []struct {
	name string
	new  func(t testing.TB, addr string) *redislock.Backend
}{
	{"rueidis", func(t testing.TB, addr string) *redislock.Backend {
		return openURL(t, "redis://"+addr+"/0?replica_ack=1&replica_ack_timeout="+ackTimeout.String())
	}},
	{"go-redis", func(t testing.TB, addr string) *redislock.Backend {
		return ackGoRedis(t, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	}},
	{"go-redis-default-options", func(t testing.TB, addr string) *redislock.Backend {
		return ackGoRedis(t, redis.NewClient(&redis.Options{Addr: addr}))
	}},
}

// ackGoRedis returns a backend on client with WithReplicaAck(1, ackTimeout);
// the test's end closes both.
func ackGoRedis(t testing.TB, client redis.UniversalClient) *redislock.Backend {
	t.Helper()
	b, err := redislock.New(client, redislock.WithReplicaAck(1, ackTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(); _ = client.Close() })
	return b
}

// TestReplicaAck runs grants and renewals with WithReplicaAck(1) on a
// primary with one replica, for each client library: confirmed while the
// replica answers (and the replica has the lock when the grant returns);
// refused, with the key left free, while the replica is stopped (SIGSTOP);
// confirmed again once it runs.
func TestReplicaAck(t *testing.T) {
	primary, replica := primaryWithReplica(t)
	for _, a := range ackAdapters {
		t.Run(a.name, func(t *testing.T) {
			ctx := testContext(t)
			// The replica answers now: a loaded machine can leave it behind
			// the ack timeout for a moment (a clean-clone run saw every
			// adapter's first grant refused within one second).
			awaitReplicaAck(t, primary.Addr(), "replica-probe")
			b := a.new(t, primary.Addr())
			c := newClient(t, b)
			plain := openURL(t, "redis://"+primary.Addr()+"/0") // another client, which does not wait for replicas
			t.Cleanup(func() { _ = plain.Close() })
			key := "ack/" + a.name
			req := func(token string) driver.AcquireRequest {
				return driver.AcquireRequest{Key: key, Token: token, TTL: 10 * time.Second}
			}

			// Acknowledged: the replica has every grant when it returns.
			g, err := b.Acquire(ctx, req("t1"))
			if err != nil {
				t.Fatal(err)
			}
			if v := rawCommand(t, []string{replica.Addr()}, "GET", lockName(key)); v != "t1" {
				t.Fatalf("the replica holds %q right after the grant, want t1", v)
			}
			if err := b.Renew(ctx, key, "t1", 10*time.Second); err != nil {
				t.Fatalf("renew: %v", err)
			}
			if err := b.Release(ctx, key, "t1"); err != nil {
				t.Fatal(err)
			}
			if g2, err := b.AcquireWait(ctx, req("t2")); err != nil || g2.Fence <= g.Fence {
				t.Fatalf("AcquireWait on a free key = %+v, %v; want a fence above %d", g2, err, g.Fence)
			}
			if err := b.Release(ctx, key, "t2"); err != nil {
				t.Fatal(err)
			}
			if err := waitedGrant(t, ctx, plain, b, primary.Addr(), key); err != nil {
				t.Fatalf("waited grant: %v", err)
			}
			if v := rawCommand(t, []string{replica.Addr()}, "GET", lockName(key)); v != "waiter" {
				t.Fatalf("the replica holds %q right after a waited grant, want the waiter's token", v)
			}
			if err := b.Release(ctx, key, "waiter"); err != nil {
				t.Fatal(err)
			}
			l, err := c.TryLock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// The replica stopped: nothing is confirmed, nothing is kept.
			if _, err := b.Acquire(ctx, req("held")); err != nil {
				t.Fatal(err)
			}
			replica.Pause()
			paused := true
			defer func() {
				if paused {
					replica.Resume()
				}
			}()
			err = b.Renew(ctx, key, "held", 10*time.Second)
			var ae *redislock.ReplicaAckError
			if !errors.As(err, &ae) || !ae.Renewal || ae.Acked != 0 || ae.Want != 1 || errors.Is(err, driver.ErrNotHeld) {
				t.Fatalf("renew while the replica is stopped: %v; want a renewal's ReplicaAckError, 0 of 1", err)
			}
			if !strings.Contains(err.Error(), "0 of 1 replicas acknowledged the renewal") {
				t.Errorf("renewal error %q does not say the replicas did not acknowledge", err)
			}
			if err := b.Release(ctx, key, "held"); err != nil {
				t.Fatal(err)
			}
			wantUnacked(t, "a grant passed on by a release", waitedGrant(t, ctx, plain, b, primary.Addr(), key))
			keyFree(t, primary, key)

			start := time.Now()
			_, err = b.Acquire(ctx, req("t3"))
			took := time.Since(start)
			wantUnacked(t, "Acquire", err)
			if took < ackTimeout || took > ackTimeout+2*time.Second {
				t.Errorf("Acquire refused after %v, want about the ack timeout %v", took, ackTimeout)
			}
			t.Logf("Acquire refused after %v", took.Round(time.Millisecond))
			keyFree(t, primary, key)
			_, err = b.AcquireWait(ctx, req("t4"))
			wantUnacked(t, "AcquireWait", err)
			keyFree(t, primary, key)
			if _, err := c.TryLock(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
				t.Errorf("TryLock: %v, want ErrNotAcquired", err)
			}
			keyFree(t, primary, key)

			// A context shorter than the timeout bounds the wait.
			sctx, cancel := context.WithTimeout(ctx, ackTimeout/4)
			start = time.Now()
			_, err = b.Acquire(sctx, req("t5"))
			cancel()
			if took := time.Since(start); took > ackTimeout*3/4 {
				t.Errorf("Acquire with a %v context returned after %v", ackTimeout/4, took)
			}
			if err == nil {
				t.Fatal("Acquire granted while the replica is stopped")
			}
			// WAIT's reply may come after the deadline (Redis times blocked
			// commands out at its cron's pace, 100ms at hz 10): the grant is
			// then unknown, and the caller releases the token, as
			// distlock's client does.
			t.Logf("with a short context: %v", err)
			if err := b.Release(context.WithoutCancel(ctx), key, "t5"); err != nil && !errors.Is(err, driver.ErrNotHeld) {
				t.Fatal(err)
			}

			replica.Resume()
			paused = false
			if _, err := b.Acquire(ctx, req("t6")); err != nil {
				t.Fatalf("after the replica resumed: %v", err)
			}
			if err := b.Release(ctx, key, "t6"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waitedGrant has token "waiter" of backend waiter wait (AcquireWait) for
// key, which holder takes first, until the waiter is queued, then releases
// holder's token: the release passes the key to the waiter, whose backend
// learns of it from the release's notice. It returns the waiter's error.
func waitedGrant(t *testing.T, ctx context.Context, holder driver.Backend, waiter driver.Waiter, addr, key string) error {
	t.Helper()
	if _, err := holder.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "first", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := waiter.AcquireWait(ctx, driver.AcquireRequest{Key: key, Token: "waiter", TTL: 10 * time.Second})
		got <- err
	}()
	eventually(t, "the waiter queued", func() error {
		if n := rawCommand(t, []string{addr}, "ZCARD", lockName(key)+":q"); n != "1" {
			return errors.New(n + " queued")
		}
		return nil
	})
	if err := holder.Release(ctx, key, "first"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter got no answer within 10s of the release")
		return nil
	}
}

// wantUnacked checks that err is a refused grant's ReplicaAckError.
func wantUnacked(t *testing.T, what string, err error) {
	t.Helper()
	var ae *redislock.ReplicaAckError
	switch {
	case !errors.Is(err, driver.ErrNotAcquired):
		t.Errorf("%s: %v, want ErrNotAcquired", what, err)
	case !errors.As(err, &ae) || ae.Renewal || ae.Acked != 0 || ae.Want != 1 || ae.ReleaseErr != nil:
		t.Errorf("%s: %v, want a released grant's ReplicaAckError, 0 of 1", what, err)
	case !strings.Contains(err.Error(), "0 of 1 replicas acknowledged the grant") || !strings.Contains(err.Error(), "released"):
		t.Errorf("%s: error %q does not say that the replicas did not acknowledge and the key was released", what, err)
	}
}

// keyFree checks that the primary holds no lock for key.
func keyFree(t *testing.T, primary *testserver.Server, key string) {
	t.Helper()
	if n := rawCommand(t, []string{primary.Addr()}, "EXISTS", lockName(key)); n != "0" {
		t.Fatalf("the primary still holds %s", key)
	}
}

// TestParseURLReplicaAck reads the replica acknowledgement parameters, and
// refuses bad ones with an error that names the parameter.
func TestParseURLReplicaAck(t *testing.T) {
	for raw, want := range map[string]struct {
		replicas int
		timeout  time.Duration
	}{
		"redis://127.0.0.1:6379/0":                                                          {0, 0},
		"redis://127.0.0.1:6379/0?replica_ack=0":                                            {0, 0},
		"redis://127.0.0.1:6379/0?replica_ack=1":                                            {1, redislock.DefaultReplicaAckTimeout},
		"redis://127.0.0.1:6379/0?replica_ack=2&replica_ack_timeout=250ms":                  {2, 250 * time.Millisecond},
		"redis-cluster://127.0.0.1:7000?replica_ack=1&replica_ack_timeout=100ms":            {1, 100 * time.Millisecond},
		"redis-sentinel://127.0.0.1:26379/mymaster?replica_ack=1&replica_ack_timeout=2s":    {1, 2 * time.Second},
		"redis://127.0.0.1:6379/0?replica_ack=1&replica_ack_timeout=8s&request_timeout=10s": {1, 8 * time.Second},
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := redislock.ParseURL(u)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", raw, err)
			continue
		}
		if n, d := cfg.ReplicaAck(); n != want.replicas || d != want.timeout {
			t.Errorf("ParseURL(%q).ReplicaAck() = %d, %v; want %d, %v", raw, n, d, want.replicas, want.timeout)
		}
	}
	for query, says := range map[string]string{
		"replica_ack=-1":                                          `parameter replica_ack="-1"`,
		"replica_ack=one":                                         `parameter replica_ack="one"`,
		"replica_ack=1.5":                                         `parameter replica_ack="1.5"`,
		"replica_ack=1&replica_ack=2":                             "parameter replica_ack: distlock: invalid option: given 2 times",
		"replica_ack=1&replica_ack_timeout=0s":                    `parameter replica_ack_timeout="0s"`,
		"replica_ack=1&replica_ack_timeout=-1s":                   `parameter replica_ack_timeout="-1s"`,
		"replica_ack=1&replica_ack_timeout=soon":                  `parameter replica_ack_timeout="soon"`,
		"replica_ack_timeout=100ms":                               "parameter replica_ack_timeout: distlock: invalid option: needs replica_ack",
		"replica_ack=0&replica_ack_timeout=100ms":                 "parameter replica_ack_timeout: distlock: invalid option: needs replica_ack",
		"replica_ack=1&replica_ack_timeout=5s":                    "must be below the request timeout (5s)",
		"replica_ack=1&replica_ack_timeout=2s&request_timeout=1s": "must be below the request timeout (1s)",
		"replica_acks=1":                                          "parameter replica_acks: distlock: invalid option: unknown",
	} {
		u, err := url.Parse("redis://127.0.0.1:6379/0?" + query)
		if err != nil {
			t.Fatal(err)
		}
		_, err = redislock.ParseURL(u)
		if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseURL(?%s): %v; want ErrInvalidOption saying %q", query, err, says)
		}
	}
}

// TestConformanceReplicaAck runs the topology part of the suite with
// WithReplicaAck(1) on a primary with one replica, through rueidis (the
// client Open builds): every grant and renewal waits for the replica. The
// whole suite, beside the package's other suites, made the timing cases of
// other packages fail under make test's load.
func TestConformanceReplicaAck(t *testing.T) {
	primary, _ := primaryWithReplica(t)
	locktest.RunTopology(t, singleNode(primary, func(t testing.TB, addr string) driver.Backend {
		return openURL(t, "redis://"+addr+"/0?replica_ack=1&replica_ack_timeout="+ackTimeout.String())
	}))
}

// TestReplicaAckCluster runs WithReplicaAck(1) on a Cluster of three masters
// of which only the first has a replica: a key whose slot that master
// serves is granted, any other is refused, with each client library. A
// WAIT sent to another node than the key's master would answer for that
// node's replicas (a connection that wrote nothing there waits for nothing):
// keys of the other masters would be granted, or the first master's refused.
func TestReplicaAckCluster(t *testing.T) {
	c := testserver.RedisCluster(t, 3)
	addrs := c.Addrs()
	clusterReplica(t, c.Nodes[0])
	clients := map[string]func(t testing.TB) *redislock.Backend{
		"rueidis": func(t testing.TB) *redislock.Backend {
			return openURL(t, "redis-cluster://"+addrs[0]+"?replica_ack=1&replica_ack_timeout="+ackTimeout.String())
		},
		"go-redis": func(t testing.TB) *redislock.Backend {
			return ackGoRedis(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true}))
		},
	}
	for name, newBackend := range clients {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			b := newBackend(t)
			defer b.Close()
			var granted, refused int
			for i := range 12 {
				key := "ack-slot/" + name + "/" + strconv.Itoa(i)
				onFirst := servedBy(c.Nodes[0].Addr(), lockName(key))
				_, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "t", TTL: 10 * time.Second})
				switch {
				case onFirst && err != nil:
					t.Errorf("%s, on the master with a replica: %v", key, err)
				case onFirst:
					granted++
				case !errors.Is(err, driver.ErrNotAcquired):
					t.Errorf("%s, on a master without replicas: %v, want ErrNotAcquired", key, err)
				default:
					refused++
					if n := rawCommand(t, addrs, "EXISTS", lockName(key)); n != "0" {
						t.Errorf("%s: refused, but still held", key)
					}
				}
			}
			if granted == 0 || refused == 0 {
				t.Fatalf("%d keys on the first master, %d elsewhere: want some of each", granted, refused)
			}
			t.Logf("%d granted on the master with a replica, %d refused elsewhere", granted, refused)
		})
	}
}

// servedBy reports whether the Cluster node at addr serves name's slot
// (it answers rather than redirects).
func servedBy(addr, name string) bool {
	_, err := testserver.RedisCommand(context.Background(), addr, "EXISTS", name)
	return err == nil
}

// clusterReplica starts a Cluster node, joins it to master's Cluster as a
// replica of master, and waits until master counts it online.
func clusterReplica(t *testing.T, master *testserver.Server) *testserver.Server {
	t.Helper()
	ctx := testContext(t)
	r := testserver.Redis(t, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(testserver.FreePort(t)),
		"--cluster-node-timeout", "2000")
	id, err := testserver.RedisCommand(ctx, master.Addr(), "CLUSTER", "MYID")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testserver.RedisCommand(ctx, r.Addr(), "CLUSTER", "MEET", testserver.Host, strconv.Itoa(master.Port)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new node knows the master", func() error {
		_, err := testserver.RedisCommand(ctx, r.Addr(), "CLUSTER", "REPLICATE", id)
		return err
	})
	eventually(t, "the replica in sync", func() error { return replicasOnline(master.Addr(), 1) })
	for i := range 1000 {
		if key := "replica-probe-" + strconv.Itoa(i); servedBy(master.Addr(), key) {
			awaitReplicaAck(t, master.Addr(), key)
			return r
		}
	}
	t.Fatalf("no probe key in the slots of %s", master.Addr())
	return r
}

// replicaAckGrants takes a key through each backend, built with
// WithReplicaAck(1), and checks that the replica at replica has the lock
// when the grant returns.
func replicaAckGrants(t *testing.T, backends map[string]*redislock.Backend, replica string) {
	for name, b := range backends {
		t.Cleanup(func() { _ = b.Close() }) // also when -run filters the subtest out
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			key := "replica-ack/" + name
			if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "t", TTL: 10 * time.Second}); err != nil {
				t.Fatal(err)
			}
			if v := rawCommand(t, []string{replica}, "GET", lockName(key)); v != "t" {
				t.Fatalf("the replica holds %q right after the grant, want t", v)
			}
			if err := b.Release(ctx, key, "t"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReplicaAckDialsAtOpen: with replica_ack, Open has rueidis dial the
// dedicated connection that WAIT goes on, so that the first grant does not
// pay for a dial out of its lease (under load that made the conformance
// suite's first 150ms grant of a client arrive expired). A backend with the
// option keeps one connection more than one without, before its first
// grant and after the same grants.
func TestReplicaAckDialsAtOpen(t *testing.T) {
	primary, _ := primaryWithReplica(t)
	ctx := testContext(t)
	conns := func(name string) int {
		return strings.Count(rawCommand(t, []string{primary.Addr()}, "CLIENT", "LIST"), " name="+name+" ")
	}
	plain := openURL(t, "redis://"+primary.Addr()+"/0?client_name=plain")
	defer plain.Close()
	acked := openURL(t, "redis://"+primary.Addr()+"/0?client_name=acked&replica_ack=1&replica_ack_timeout="+ackTimeout.String())
	defer acked.Close()
	if n, want := conns("acked"), conns("plain")+1; n != want {
		t.Fatalf("after Open: %d connections, want %d (those of a backend without the option, and one for WAIT)", n, want)
	}
	// rueidis sends each command on one of its pipeline connections to the
	// node (two on two cores), picked at random and dialled at first use:
	// 20 grants and releases each make it all but certain that both
	// backends dialled every one, which 3 left to chance (one in 32 that a
	// backend's six commands all took one connection).
	for name, b := range map[string]*redislock.Backend{"plain": plain, "acked": acked} {
		for i := range 20 {
			key := "dial/" + name + "/" + strconv.Itoa(i)
			if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "t", TTL: time.Second}); err != nil {
				t.Fatal(err)
			}
			if err := b.Release(ctx, key, "t"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each backend may meanwhile have opened its subscription connection
	// (at its first grant, in the background): the grants must have dialled
	// nothing beyond that, and the one for WAIT.
	eventually(t, "no more connections after the grants than one for WAIT", func() error {
		if n, most := conns("acked"), conns("plain")+1; n > most {
			return fmt.Errorf("%d connections, want at most %d", n, most)
		}
		return nil
	})
}
