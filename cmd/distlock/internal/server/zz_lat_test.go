package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

func TestZZLat(t *testing.T) {
	etcd := testserver.Etcd(t)
	st := remoteStore{"etcd", testserver.EtcdEndpoint(etcd)}
	svc := startRemoteService(t, st)
	direct := distlock.New(st.backend(t))
	remote := distlock.New(remoteBackendAt(t, svc.addr, remoteClient))
	defer direct.Close()
	defer remote.Close()
	ctx := context.Background()
	for round := 0; round < 6; round++ {
		for _, p := range []struct {
			name string
			c    *distlock.Client
		}{{"direct", direct}, {"remote", remote}} {
			var lk, rel, ins, try time.Duration
			const n = 500
			for i := 0; i < n; i++ {
				key := fmt.Sprintf("k/%s/%d", p.name, i%4)
				t0 := time.Now()
				l, err := p.c.Lock(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				t1 := time.Now()
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				t2 := time.Now()
				if _, err := p.c.Inspect(ctx, key); err != nil {
					t.Fatal(err)
				}
				t3 := time.Now()
				l, err = p.c.TryLock(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				t4 := time.Now()
				l.Release(ctx)
				lk += t1.Sub(t0)
				rel += t2.Sub(t1)
				ins += t3.Sub(t2)
				try += t4.Sub(t3)
			}
			t.Logf("%s: lock %v release %v inspect %v trylock %v", p.name, lk/n, rel/n, ins/n, try/n)
		}
	}
}
