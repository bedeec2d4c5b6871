package redistool

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/doctor/doctortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// redisDo runs a command on a test Redis and fails the test on an error.
func redisDo(t *testing.T, addr string, args ...string) {
	t.Helper()
	if _, err := testserver.RedisCommand(context.Background(), addr, args...); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

func TestRedisEvictionPolicies(t *testing.T) {
	s := testserver.Redis(t, "--maxmemory", "10mb", "--maxmemory-policy", "volatile-lru")
	u := "redis://" + s.Addr()
	f := doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "maxmemory-policy", doctor.Danger, "volatile-lru, maxmemory 10485760")
	if !strings.Contains(f.Consequence, "every lock key and fence counter has one") {
		t.Errorf("consequence does not say lock keys have a TTL: %s", f.Consequence)
	}
	for _, p := range []string{"volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru", "allkeys-lfu", "allkeys-random"} {
		redisDo(t, s.Addr(), "CONFIG", "SET", "maxmemory-policy", p)
		doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "maxmemory-policy", doctor.Danger, p)
	}
	redisDo(t, s.Addr(), "CONFIG", "SET", "maxmemory-policy", "noeviction")
	doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "maxmemory-policy", doctor.Info, "noeviction")

	redisDo(t, s.Addr(), "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	redisDo(t, s.Addr(), "CONFIG", "SET", "maxmemory", "0")
	f = doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "maxmemory-policy", doctor.Warning, "allkeys-lru, maxmemory 0")
	if !strings.Contains(f.Consequence, "evicts nothing today") {
		t.Errorf("maxmemory 0: consequence does not say what happens: %s", f.Consequence)
	}
}

func TestRedisPersistence(t *testing.T) {
	s := testserver.Redis(t)
	u := "redis://" + s.Addr()
	f := doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "persistence", doctor.Danger, "no persistence")
	if !strings.Contains(f.Consequence, "server's clock") {
		t.Errorf("consequence does not say what keeps fences increasing: %s", f.Consequence)
	}
	redisDo(t, s.Addr(), "CONFIG", "SET", "save", "3600 1")
	doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "persistence", doctor.Danger, "RDB snapshots only (save 3600 1)")
	redisDo(t, s.Addr(), "CONFIG", "SET", "appendonly", "yes")
	doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "persistence", doctor.Warning, "appendfsync everysec")
	redisDo(t, s.Addr(), "CONFIG", "SET", "appendfsync", "no")
	doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "persistence", doctor.Warning, "appendfsync no")
	redisDo(t, s.Addr(), "CONFIG", "SET", "appendfsync", "always")
	doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "persistence", doctor.Info, "appendfsync always")
}

func TestRedisClean(t *testing.T) {
	s := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction", "--maxmemory", "64mb")
	r := doctortest.Run(t, "redis://"+s.Addr()+"/2?prefix=app:&dial_timeout=1s&waiter_timeout=2s&client_name=doctor", doctor.Options{})
	doctortest.Clean(t, r)
	doctortest.Want(t, r, "clock", doctor.Info, "server clock")
	doctortest.Want(t, r, "replicas", doctor.Info, "no replicas")
}

func TestRedisSentinelReplicas(t *testing.T) {
	set := testserver.RedisSentinel(t)
	addrs := set.SentinelAddrs()
	u := "redis-sentinel://" + addrs[0] + "/" + testserver.SentinelMaster + "?addr=" + addrs[1]
	r := doctortest.Run(t, u, doctor.Options{})
	doctortest.Want(t, r, "topology", doctor.Info, "Redis Sentinel: master \"mymaster\" at "+set.Primary().Addr()+" (flags master), 1 replicas, 3 sentinels, quorum 2")
	doctortest.Want(t, r, "min-replicas-to-write", doctor.Warning, "1 replicas connected, min-replicas-to-write 0")
	if n := len(doctortest.Findings(r, "persistence")); n != 2 {
		t.Errorf("persistence checked on %d nodes, want the primary and the replica:\n%s", n, doctortest.Dump(r))
	}

	redisDo(t, set.Primary().Addr(), "CONFIG", "SET", "min-replicas-to-write", "1")
	if f := doctortest.Findings(doctortest.Run(t, u, doctor.Options{}), "min-replicas-to-write"); len(f) != 0 {
		t.Errorf("min-replicas-to-write 1 still reported: %+v", f)
	}
	doctortest.Want(t, doctortest.Run(t, "redis://"+set.Replica().Addr(), doctor.Options{}), "role", doctor.Warning, "this node is a replica")

	_, err := doctor.Check(context.Background(), "redis-sentinel://"+addrs[0]+"/nosuchmaster", doctor.Options{})
	if !errors.Is(err, doctor.ErrInvalidURL) || !strings.Contains(err.Error(), "nosuchmaster") {
		t.Errorf("unknown master: %v, want doctor.ErrInvalidURL naming it", err)
	}
}

func TestRedisCluster(t *testing.T) {
	c := testserver.RedisCluster(t, 3)
	for _, u := range []string{"redis-cluster://" + c.Addrs()[0], "redis://" + c.Addrs()[1]} {
		r := doctortest.Run(t, u, doctor.Options{})
		doctortest.Want(t, r, "topology", doctor.Info, "Redis Cluster: 3 masters, 0 replicas, cluster_state ok")
		if n := len(doctortest.Findings(r, "maxmemory-policy")); n != 3 {
			t.Errorf("%s: %d nodes inspected, want 3:\n%s", u, n, doctortest.Dump(r))
		}
		if len(doctortest.Findings(r, "cluster-state")) != 0 {
			t.Errorf("%s: healthy cluster reported failing:\n%s", u, doctortest.Dump(r))
		}
	}
	c.Nodes[2].Kill()
	r := doctortest.Run(t, "redis-cluster://"+c.Addrs()[0], doctor.Options{Timeout: time.Second})
	deadline := time.Now().Add(20 * time.Second)
	for len(doctortest.Findings(r, "cluster-state")) == 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond) // the cluster marks a node failed after its node timeout
		r = doctortest.Run(t, "redis-cluster://"+c.Addrs()[0], doctor.Options{Timeout: time.Second})
	}
	doctortest.Want(t, r, "cluster-state", doctor.Danger, "nodes failing: "+c.Addrs()[2])
}

func TestCheckHonoursContext(t *testing.T) {
	s := testserver.Redis(t)
	s.Pause()
	defer s.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	// go-redis finishes a dial it started in the background within the
	// request timeout, so the timeout is kept short enough for the leak
	// check at the end, and long enough to tell it from the context.
	_, err := doctor.Check(ctx, "redis://"+s.Addr(), doctor.Options{Timeout: 3 * time.Second})
	if d := time.Since(start); err == nil || d > 2*time.Second {
		t.Fatalf("doctor.Check on a paused Redis: %v after %v, want an error within the context's 200ms", err, d)
	}
}

func TestInvalidURLs(t *testing.T) {
	doctortest.InvalidURLs(t, func(a string) []string {
		return []string{"redis-sentinel://" + a, "redis-sentinel://" + a + "/m/x", "redis://" + a + "/abc", "redis-cluster:///"}
	})
}

// TestRefusedAsOpen: a URL redislock refuses, doctor refuses in its words.
func TestRefusedAsOpen(t *testing.T) {
	doctortest.Refused(t, redislock.ParseURL, "redis://127.0.0.1:1?colour=red", "redis://127.0.0.1:1?waiter_timeout=1ms",
		"redis://127.0.0.1:1?replica_ack=-1", "redis://127.0.0.1:1?replica_ack_timeout=1s",
		"rediss://127.0.0.1:1?dial_timeout=soon", "redis-cluster://127.0.0.1:1?prefix=a{b}", "redis-sentinel://127.0.0.1:1/m/0/1")
}

func TestUnreachable(t *testing.T) {
	doctortest.Unreachable(t, func(a string) []string {
		return []string{"redis://" + a, "redis-cluster://" + a, "redis-sentinel://" + a + "/m"}
	})
}

// TestRedisReplicaAck: replica_ack against the replicas a primary has
// online: too few is a danger, exactly as many a warning, more is fine.
func TestRedisReplicaAck(t *testing.T) {
	p := testserver.Redis(t)
	u := "redis://" + p.Addr() + "?replica_ack=1&replica_ack_timeout=250ms"
	f := doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "replica-ack", doctor.Danger, "replica_ack=1, replica_ack_timeout=250ms; 0 replicas online")
	if !strings.Contains(f.Consequence, "no lock can be taken") {
		t.Errorf("consequence does not say that locking stops: %s", f.Consequence)
	}
	testserver.Redis(t, "--replicaof", testserver.Host, strconv.Itoa(p.Port))
	deadline := time.Now().Add(20 * time.Second)
	r := doctortest.Run(t, u, doctor.Options{})
	for len(doctortest.Findings(r, "replica-ack")) > 0 && doctortest.Findings(r, "replica-ack")[0].Severity == doctor.Danger && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // until the replica is in sync
		r = doctortest.Run(t, u, doctor.Options{})
	}
	doctortest.Want(t, r, "replica-ack", doctor.Warning, "1 replicas online")
	doctortest.Want(t, doctortest.Run(t, "redis://"+p.Addr()+"?replica_ack=2", doctor.Options{}), "replica-ack", doctor.Danger, "replica_ack=2, replica_ack_timeout=1s; 1 replicas online")
	if f := doctortest.Findings(doctortest.Run(t, "redis://"+p.Addr(), doctor.Options{}), "replica-ack"); len(f) != 0 {
		t.Errorf("replica-ack reported without replica_ack: %+v", f)
	}
}
