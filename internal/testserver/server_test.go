package testserver

import (
	"context"
	"testing"
	"time"
)

func TestServersStartStopRestart(t *testing.T) {
	ctx := context.Background()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		s := Redis(t)
		if _, err := RedisCommand(ctx, s.Addr(), "SET", "k", "v"); err != nil {
			t.Fatal(err)
		}
		s.Restart()
		if v, err := RedisCommand(ctx, s.Addr(), "EXISTS", "k"); err != nil || v != "0" {
			t.Fatalf("after a restart without persistence EXISTS = %q, %v; want 0", v, err)
		}
		s.Pause()
		if _, err := RedisCommand(ctxTimeout(t, 300), s.Addr(), "PING"); err == nil {
			t.Fatal("a paused server answered")
		}
		s.Resume()
		if _, err := RedisCommand(ctx, s.Addr(), "PING"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		s := Postgres(t)
		s.Restart()
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		s := MariaDB(t)
		s.Restart()
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		s := Etcd(t)
		s.Restart()
	})
	t.Run("etcd-cluster", func(t *testing.T) {
		t.Parallel()
		ms := EtcdCluster(t, 3)
		ms[0].Kill()
		ms[0].Start()
	})
	t.Run("zookeeper", func(t *testing.T) {
		t.Parallel()
		s := ZooKeeper(t)
		s.Restart()
	})
}

func ctxTimeout(t *testing.T, ms int) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(ms)*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}
