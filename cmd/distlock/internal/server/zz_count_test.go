package server_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

func TestZZCount(t *testing.T) {
	etcd := testserver.Etcd(t)
	st := remoteStore{"etcd", testserver.EtcdEndpoint(etcd)}
	svc := startRemoteService(t, st)
	direct := distlock.New(st.backend(t))
	remote := distlock.New(remoteBackendAt(t, svc.addr, remoteClient))
	defer direct.Close()
	defer remote.Close()
	ep := st.addr
	snap := func() map[string]float64 {
		m := map[string]float64{}
		for _, meth := range []string{"Range", "Txn", "Put", "DeleteRange", "LeaseGrant", "LeaseRevoke", "LeaseKeepAlive", "Watch", "LeaseTimeToLive", "Lock", "Unlock"} {
			m[meth] = etcdMetric(t, ep, func(l string) bool {
				return strings.HasPrefix(l, "grpc_server_handled_total") && strings.Contains(l, `grpc_method="`+meth+`"`)
			})
		}
		m["msgs_recv"] = etcdMetric(t, ep, func(l string) bool { return strings.HasPrefix(l, "grpc_server_msg_received_total") })
		m["proposals"] = etcdMetric(t, ep, func(l string) bool { return strings.HasPrefix(l, "etcd_server_proposals_committed_total") })
		for _, name := range []string{"etcd_debugging_mvcc_events_total", "etcd_debugging_mvcc_watcher_total", "etcd_debugging_mvcc_watch_stream_total", "grpc_server_msg_sent_total", "etcd_debugging_mvcc_put_total", "etcd_debugging_mvcc_delete_total", "etcd_debugging_mvcc_range_total", "etcd_debugging_mvcc_txn_total", "etcd_network_client_grpc_received_bytes_total", "etcd_network_client_grpc_sent_bytes_total"} {
			m[name] = etcdMetric(t, ep, func(l string) bool { return strings.HasPrefix(l, name) })
		}
		m["cpu"] = etcdMetric(t, ep, func(l string) bool { return strings.HasPrefix(l, "process_cpu_seconds_total") })
		return m
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{st.addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	g, _ := cli.Grant(context.Background(), 60)
	cli.KeepAlive(context.Background(), g.ID)
	locks := v3lockpb.NewLockClient(cli.ActiveConnection())
	cyc := func(c *distlock.Client) func(ctx context.Context, key string) error {
		return func(ctx context.Context, key string) error {
			l, err := c.Lock(ctx, key)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}
	}
	etcdlock := func(ctx context.Context, key string) error {
		l, err := locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte(key), Lease: int64(g.ID)})
		if err != nil {
			return err
		}
		_, err = locks.Unlock(ctx, &v3lockpb.UnlockRequest{Key: l.Key})
		return err
	}
	for _, p := range []struct {
		name string
		c    func(context.Context, string) error
	}{{"direct", cyc(direct)}, {"remote", cyc(remote)}, {"etcdlock", etcdlock}, {"direct", cyc(direct)}, {"remote", cyc(remote)}, {"etcdlock", etcdlock}} {
		ctx := context.Background()
		for i := 0; i < 20; i++ {
			if err := p.c(ctx, "warm"+p.name); err != nil {
				t.Fatal(err)
			}
		}
		before := snap()
		t0 := time.Now()
		const n = 2000
		for i := 0; i < n; i++ {
			if err := p.c(ctx, fmt.Sprintf("k/%s/%d", p.name, i%4)); err != nil {
				t.Fatal(err)
			}
		}
		after := snap()
		var keys []string
		for k := range after {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var sb strings.Builder
		for _, k := range keys {
			if d := after[k] - before[k]; d != 0 {
				if k == "cpu" {
					fmt.Fprintf(&sb, " etcd-cpu-µs=%.0f", d/n*1e6)
					continue
				}
				fmt.Fprintf(&sb, " %s=%.3f", k, d/n)
			}
		}
		t.Logf("%s per cycle: wall-µs=%.0f%s", p.name, float64(time.Since(t0).Microseconds())/n, sb.String())
	}
}
