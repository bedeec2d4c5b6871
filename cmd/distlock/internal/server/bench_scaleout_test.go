package server_test

import (
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkScaleOut runs three service instances over one shared store, a
// 3-member etcd cluster and then a 3-master Redis Cluster, and measures
// Lock+Release from 64 callers (a key each): straight on the store
// (direct), through one instance (one), and spread over the three (three:
// caller i through instance i mod 3). The paths run in alternating rounds,
// as in BenchmarkRemote. It reports each path's throughput and median, and
// three/one, what the two more instances bring on this machine:
//
//	cd cmd/distlock && go test -run '^$' -bench BenchmarkScaleOut -benchtime 2000x -timeout 20m ./internal/server
func BenchmarkScaleOut(b *testing.B) {
	const callers = 64
	for _, st := range []struct {
		name  string
		store func(testing.TB) remoteStore
	}{
		{"etcd-3", func(t testing.TB) remoteStore {
			var eps []string
			for _, m := range testserver.EtcdCluster(t, 3) {
				eps = append(eps, testserver.EtcdEndpoint(m))
			}
			return remoteStore{"etcd", strings.Join(eps, ",")}
		}},
		{"redis-cluster-3", func(t testing.TB) remoteStore {
			var addrs []string
			for _, n := range testserver.RedisCluster(t, 3).Nodes {
				addrs = append(addrs, n.Addr())
			}
			return remoteStore{"redis", strings.Join(addrs, ",")}
		}},
	} {
		b.Run(st.name, func(b *testing.B) {
			store := st.store(b)
			direct := distlock.New(store.backend(b))
			b.Cleanup(func() { _ = direct.Close() })
			instances := make([]*distlock.Client, 3)
			for i := range instances {
				svc := startRemoteService(b, store)
				instances[i] = distlock.New(remoteBackendAt(b, svc.addr, remoteClient))
				b.Cleanup(func() { _ = instances[i].Close() })
			}
			paths := []benchPath{
				clientPath("direct", direct),
				clientPath("one", instances[0]),
				clientPath("three", instances...),
			}
			took, ok := remoteRounds(b, paths, st.name, callers, false)
			if !ok {
				return
			}
			b.ReportMetric(took[1].Seconds()/took[2].Seconds(), "three/one")
			b.ReportMetric(took[0].Seconds()/took[2].Seconds(), "three/direct")
			b.ReportMetric(0, "ns/op")
		})
	}
}
