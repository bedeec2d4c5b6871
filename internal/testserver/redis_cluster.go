package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisClusterSet is a Redis Cluster of masters without replicas.
type RedisClusterSet struct {
	// Nodes are the masters, in the order their slots were assigned.
	Nodes []*Server
}

// Addrs returns the client address of every node.
func (c *RedisClusterSet) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// RedisCluster starts masters redis-server nodes in cluster mode (without
// persistence), joins them with `redis-cli --cluster create`, and waits until
// every node reports cluster_state:ok. It needs at least 3 masters.
func RedisCluster(t testing.TB, masters int) *RedisClusterSet {
	t.Helper()
	if masters < 3 {
		t.Fatalf("testserver: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	bin := lookBinary(t, "redis-server", "redis-server")
	cli := lookBinary(t, "redis-tools", "redis-cli")
	dir := tempDir(t, "rcluster")
	c := &RedisClusterSet{Nodes: make([]*Server, masters)}
	for i := range masters {
		s := &Server{Name: fmt.Sprintf("redis-cluster-%d", i), Port: clusterPort(t), Dir: filepath.Join(dir, strconv.Itoa(i))}
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			t.Fatalf("testserver: %v", err)
		}
		s.command = func() *exec.Cmd {
			return exec.Command(bin, "--port", strconv.Itoa(s.Port), "--bind", Host, "--dir", s.Dir,
				"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.Dir, "nodes.conf"),
				"--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no", "--daemonize", "no")
		}
		s.ready = func(ctx context.Context) error {
			_, err := RedisCommand(ctx, s.Addr(), "PING")
			return err
		}
		c.Nodes[i] = newServer(t, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	if _, err := run(ctx, cli, append(args, "--cluster-replicas", "0", "--cluster-yes")...); err != nil {
		t.Fatalf("testserver: create cluster: %v", err)
	}
	for _, n := range c.Nodes {
		if err := waitFor(ctx, func() error { return redisInfoHas(ctx, n.Addr(), "cluster_state:ok", "CLUSTER", "INFO") }); err != nil {
			t.Fatalf("testserver: %s: %v", n.Name, err)
		}
	}
	return c
}

// clusterPort returns a free port P whose cluster bus port P+10000 is free too.
func clusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		p := FreePort(t)
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(Host, strconv.Itoa(p+10000)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p
	}
	t.Fatal("testserver: no free port pair for a cluster node")
	return 0
}

// redisInfoHas reports whether the reply to cmd on addr contains want.
func redisInfoHas(ctx context.Context, addr, want string, cmd ...string) error {
	reply, err := RedisCommand(ctx, addr, cmd...)
	if err != nil {
		return err
	}
	if !strings.Contains(reply, want) {
		return fmt.Errorf("%v: no %q yet", cmd, want)
	}
	return nil
}

// waitFor retries check every 50ms until it succeeds or ctx ends.
func waitFor(ctx context.Context, check func() error) error {
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
