package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SentinelMaster is the name the sentinels of RedisSentinel monitor.
const SentinelMaster = "mymaster"

// RedisSentinelSet is a primary, one replica and three sentinels (quorum 2,
// down-after 1000ms) monitoring them as SentinelMaster.
type RedisSentinelSet struct {
	// Data are the two data nodes; which one is the primary changes with
	// Failover.
	Data [2]*Server
	// Sentinels are the three sentinel processes.
	Sentinels []*Server

	mu      sync.Mutex
	primary int
}

// SentinelAddrs returns the sentinels' addresses.
func (s *RedisSentinelSet) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Primary returns the data node that is the primary now.
func (s *RedisSentinelSet) Primary() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Data[s.primary]
}

// Replica returns the data node that is the replica now.
func (s *RedisSentinelSet) Replica() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Data[1-s.primary]
}

// RedisSentinel starts a primary, a replica (--replicaof) and three sentinels
// with their own writable config files, and waits until the replica link is
// up and every sentinel sees the replica and the two other sentinels.
func RedisSentinel(t testing.TB) *RedisSentinelSet {
	t.Helper()
	bin := lookBinary(t, "redis-server", "redis-server")
	dir := tempDir(t, "rsentinel")
	set := &RedisSentinelSet{}
	for i := range set.Data {
		s := &Server{Name: fmt.Sprintf("redis-data-%d", i), Port: FreePort(t), Dir: filepath.Join(dir, "data"+strconv.Itoa(i))}
		mkdir(t, s.Dir)
		var extra []string
		if i == 1 {
			extra = []string{"--replicaof", Host, strconv.Itoa(set.Data[0].Port)}
		}
		s.command = func() *exec.Cmd {
			args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", Host, "--dir", s.Dir,
				"--save", "", "--appendonly", "no", "--daemonize", "no", "--repl-diskless-sync-delay", "0"}, extra...)
			return exec.Command(bin, args...)
		}
		s.ready = func(ctx context.Context) error {
			_, err := RedisCommand(ctx, s.Addr(), "PING")
			return err
		}
		set.Data[i] = newServer(t, s)
	}
	for i := range 3 {
		s := &Server{Name: fmt.Sprintf("redis-sentinel-%d", i), Port: FreePort(t), Dir: filepath.Join(dir, "sentinel"+strconv.Itoa(i))}
		mkdir(t, s.Dir)
		conf := filepath.Join(s.Dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind %s\ndir %s\nsentinel monitor %s %s %d 2\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
			s.Port, Host, s.Dir, SentinelMaster, Host, set.Data[0].Port, SentinelMaster, SentinelMaster)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatalf("testserver: %v", err)
		}
		s.command = func() *exec.Cmd { return exec.Command(bin, conf, "--sentinel") }
		s.ready = func(ctx context.Context) error {
			_, err := RedisCommand(ctx, s.Addr(), "PING")
			return err
		}
		set.Sentinels = append(set.Sentinels, newServer(t, s))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := waitFor(ctx, func() error {
		return redisInfoHas(ctx, set.Data[1].Addr(), "master_link_status:up", "INFO", "replication")
	}); err != nil {
		t.Fatalf("testserver: replica link: %v", err)
	}
	for _, sn := range set.Sentinels {
		if err := waitFor(ctx, func() error { return sentinelSees(ctx, sn.Addr()) }); err != nil {
			t.Fatalf("testserver: %s: %v", sn.Name, err)
		}
	}
	return set
}

func mkdir(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("testserver: %v", err)
	}
}

// sentinelSees reports whether the sentinel at addr knows the replica and
// the two other sentinels.
func sentinelSees(ctx context.Context, addr string) error {
	reply, err := RedisCommand(ctx, addr, "SENTINEL", "MASTER", SentinelMaster)
	if err != nil {
		return err
	}
	f := strings.Split(reply, "\n")
	fields := make(map[string]string, len(f)/2)
	for i := 0; i+1 < len(f); i += 2 {
		fields[f[i]] = f[i+1]
	}
	if fields["num-slaves"] != "1" || fields["num-other-sentinels"] != "2" {
		return fmt.Errorf("sentinel sees %s replicas and %s other sentinels", fields["num-slaves"], fields["num-other-sentinels"])
	}
	return nil
}

// Failover makes the sentinels promote the replica (SENTINEL FAILOVER) and
// waits until it is the primary and every sentinel reports it. It returns the
// new primary.
func (s *RedisSentinelSet) Failover(t testing.TB) *Server {
	t.Helper()
	next := s.Replica()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := waitFor(ctx, func() error {
		_, err := RedisCommand(ctx, s.Sentinels[0].Addr(), "SENTINEL", "FAILOVER", SentinelMaster)
		if err != nil && strings.Contains(err.Error(), "INPROG") {
			return nil // a failover is already running
		}
		return err // -NOGOODSLAVE right after start: retry
	})
	if err != nil {
		t.Fatalf("testserver: SENTINEL FAILOVER: %v", err)
	}
	want := strings.ReplaceAll(next.Addr(), ":", "\n")
	err = waitFor(ctx, func() error {
		if err := redisInfoHas(ctx, next.Addr(), "role:master", "INFO", "replication"); err != nil {
			return err
		}
		for _, sn := range s.Sentinels {
			reply, err := RedisCommand(ctx, sn.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster)
			if err != nil {
				return err
			}
			if reply != want {
				return errors.New(sn.Name + " still reports " + strings.ReplaceAll(reply, "\n", ":"))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testserver: failover to %s: %v", next.Name, err)
	}
	s.mu.Lock()
	s.primary = 1 - s.primary
	s.mu.Unlock()
	return next
}
