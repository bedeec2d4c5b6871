//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testserver"
)

// redisShards is a Redis Cluster of three masters, each with one replica:
// every shard is two servers, either of which may be the master.
type redisShards struct {
	shards [][2]*testserver.Server
}

// deployCluster starts a Redis Cluster of three masters with a replica
// each; its clients open it with the URL parameters params ("" for none).
func deployCluster(params string) func(t *testing.T) *deployment {
	return func(t *testing.T) *deployment {
		c := testserver.RedisCluster(t, 3)
		rs := &redisShards{}
		for _, m := range c.Nodes {
			rs.shards = append(rs.shards, [2]*testserver.Server{m, clusterReplica(t, m)})
		}
		addrs := c.Addrs()
		u := "redis-cluster://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
		if params != "" {
			u += "&" + params
		}
		return &deployment{url: func(string) string { return u }, cluster: rs}
	}
}

// clusterReplica starts a Cluster node, joins it to master's Cluster as a
// replica of master, and waits until master counts it online.
func clusterReplica(t *testing.T, master *testserver.Server) *testserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := testserver.Redis(t, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(testserver.FreePort(t)),
		"--cluster-node-timeout", "2000")
	id, err := testserver.RedisCommand(ctx, master.Addr(), "CLUSTER", "MYID")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testserver.RedisCommand(ctx, r.Addr(), "CLUSTER", "MEET", testserver.Host, strconv.Itoa(master.Port)); err != nil {
		t.Fatal(err)
	}
	err = until(ctx, func() error { // the new node must know the master first
		_, err := testserver.RedisCommand(ctx, r.Addr(), "CLUSTER", "REPLICATE", id)
		return err
	})
	if err == nil { // loaded, not only sent (a replica acknowledges nothing before)
		err = until(ctx, func() error { return role(ctx, r.Addr(), "slave", "master_link_status:up") })
	}
	if err != nil {
		t.Fatalf("replica of %s: %v", master.Addr(), err)
	}
	return r
}

// role checks that the server at addr has the role want ("master" or
// "slave") and that its INFO replication says also.
func role(ctx context.Context, addr, want, also string) error {
	info, err := testserver.RedisCommand(ctx, addr, "INFO", "replication")
	if err != nil {
		return err
	}
	if !strings.Contains(info, "role:"+want+"\r\n") || !strings.Contains(info, also) {
		return fmt.Errorf("%s: not yet role %s with %q", addr, want, also)
	}
	return nil
}

// until retries check every 50ms until it succeeds or ctx ends.
func until(ctx context.Context, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// failover forces the replica of every shard that serves one of names to
// take over its master's slots (CLUSTER FAILOVER FORCE: no handshake with
// the master, whose writes since the replica's last sync are lost, as when
// a master fails), and waits until each has.
func (rs *redisShards) failover(t *testing.T, names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	var shards atomic.Int32
	errs := make([]error, len(rs.shards))
	for i, sh := range rs.shards {
		master, replica := sh[0], sh[1]
		if role(ctx, master.Addr(), "master", "") != nil {
			master, replica = replica, master
		}
		if !servesAny(ctx, master.Addr(), names) {
			continue
		}
		shards.Add(1)
		wg.Go(func() {
			errs[i] = rs.takeOver(ctx, replica, master)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Errorf("cluster failover: %v", err)
		return
	}
	t.Logf("failed over %d shards in %v", shards.Load(), time.Since(start).Round(time.Millisecond))
}

// takeOver makes replica the master of old's slots and waits until old
// follows it. A forced failover that does not win its election (the
// masters vote for one failover of a shard per two node timeouts) ends
// after 5s without a retry: it is asked again then.
func (rs *redisShards) takeOver(ctx context.Context, replica, old *testserver.Server) error {
	var asked time.Time
	err := until(ctx, func() error {
		if role(ctx, replica.Addr(), "master", "") == nil {
			return nil
		}
		if time.Since(asked) > 6*time.Second {
			if _, err := testserver.RedisCommand(ctx, replica.Addr(), "CLUSTER", "FAILOVER", "FORCE"); err != nil {
				return err // refused while the replica still syncs
			}
			asked = time.Now()
		}
		return fmt.Errorf("%s: not master yet", replica.Addr())
	})
	if err == nil {
		err = until(ctx, func() error { return role(ctx, old.Addr(), "slave", "master_link_status:up") })
	}
	return err
}

// servesAny reports whether the Cluster node at addr serves the slot of any
// of names (it answers rather than redirects).
func servesAny(ctx context.Context, addr string, names []string) bool {
	for _, n := range names {
		if _, err := testserver.RedisCommand(ctx, addr, "EXISTS", n); err == nil {
			return true
		}
	}
	return false
}

// clusterFailover fails over the shards of the scenario's keys while a
// holder works, twice, a lease apart.
func clusterFailover(t *testing.T, r *run) {
	r.repeat(2, func() {
		if r.occupant() >= 0 {
			r.dep.cluster.failover(t, []string{"distlock:{k0}", "distlock:{k1}"})
		}
	})
}
