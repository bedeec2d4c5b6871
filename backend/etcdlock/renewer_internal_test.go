package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/distlock/internal/testserver"
)

func renewerClient(t testing.TB) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{testserver.EtcdEndpoint(testserver.Etcd(t))},
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// A renewer renews live leases for their TTL, tells a revoked one with
// rpctypes.ErrLeaseNotFound, and fails after close.
func TestRenewer(t *testing.T) {
	cli := renewerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newRenewer(cli, 2)
	var leases []clientv3.LeaseID
	for range 5 {
		l, err := cli.Grant(ctx, 30)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l.ID)
	}
	var wg sync.WaitGroup
	for _, id := range leases {
		for range 20 {
			wg.Go(func() {
				if ttl, err := r.keepAlive(ctx, id); err != nil || ttl != 30 {
					t.Errorf("keepAlive of a live lease: %d, %v; want 30", ttl, err)
				}
			})
		}
	}
	wg.Wait()
	if _, err := cli.Revoke(ctx, leases[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := r.keepAlive(ctx, leases[0]); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Errorf("keepAlive of a revoked lease: %v, want ErrLeaseNotFound", err)
	}
	r.close()
	if _, err := r.keepAlive(ctx, leases[1]); !errors.Is(err, errRenewerClosed) {
		t.Errorf("keepAlive after close: %v, want errRenewerClosed", err)
	}
}

// BenchmarkLeaseRenewal renews 1 000 leases from 64 goroutines: with
// clientv3's KeepAliveOnce, a stream per renewal, and with a renewer over
// one and over renewStreams streams.
func BenchmarkLeaseRenewal(b *testing.B) {
	cli := renewerClient(b)
	ctx := context.Background()
	leases := make([]clientv3.LeaseID, 1000)
	for i := range leases {
		l, err := cli.Grant(ctx, 60)
		if err != nil {
			b.Fatal(err)
		}
		leases[i] = l.ID
	}
	ways := []struct {
		name  string
		renew func(context.Context, clientv3.LeaseID) error
	}{
		{"KeepAliveOnce", func(ctx context.Context, id clientv3.LeaseID) error { _, err := cli.KeepAliveOnce(ctx, id); return err }},
	}
	for _, n := range []int{1, renewStreams} {
		r := newRenewer(cli, n)
		b.Cleanup(r.close)
		ways = append(ways, struct {
			name  string
			renew func(context.Context, clientv3.LeaseID) error
		}{fmt.Sprintf("streams=%d", n), func(ctx context.Context, id clientv3.LeaseID) error { _, err := r.keepAlive(ctx, id); return err }})
	}
	for _, w := range ways {
		b.Run(w.name, func(b *testing.B) {
			b.SetParallelism(32) // 64 goroutines on 2 cores
			var next sync.Mutex
			i := 0
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					next.Lock()
					id := leases[i%len(leases)]
					i++
					next.Unlock()
					if err := w.renew(ctx, id); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
