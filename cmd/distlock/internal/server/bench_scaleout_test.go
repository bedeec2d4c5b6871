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

// BenchmarkRoutes measures a service that keeps each of two tenants in an
// etcd of its own (server.Config.Routes, serve --route) against one that
// keeps both in one etcd: 64 callers with a key each, half of them of each
// tenant, Lock+Release through one instance (one-store, two-stores), and
// straight on the first etcd (direct), in alternating rounds. It reports
// each path's throughput and median, and two-stores/one-store:
//
//	cd cmd/distlock && go test -run '^$' -bench BenchmarkRoutes -benchtime 4000x ./internal/server
func BenchmarkRoutes(b *testing.B) {
	const callers = 64
	first := remoteStore{"etcd", testserver.EtcdEndpoint(testserver.Etcd(b))}
	second := remoteStore{"etcd", testserver.EtcdEndpoint(testserver.Etcd(b))}
	direct := distlock.New(first.backend(b))
	b.Cleanup(func() { _ = direct.Close() })
	oneStore := startRemoteService(b, first)
	twoStores := startRemoteServiceEnv(b, first, remoteRoutesEnv+"=tenants/"+remoteOtherTenant+"/="+second.name+" "+second.addr)
	clients := func(svc *remoteService) []*distlock.Client {
		var cs []*distlock.Client
		for _, token := range []string{remoteClient, remoteOther} {
			c := distlock.New(remoteBackendAt(b, svc.addr, token))
			b.Cleanup(func() { _ = c.Close() })
			cs = append(cs, c)
		}
		return cs
	}
	paths := []benchPath{
		clientPath("direct", direct),
		clientPath("one-store", clients(oneStore)...),
		clientPath("two-stores", clients(twoStores)...),
	}
	took, ok := remoteRounds(b, paths, "etcd", callers, false, oneStore.pid, twoStores.pid)
	if !ok {
		return
	}
	puts := etcdMetric(b, second.addr, func(l string) bool { return strings.HasPrefix(l, "etcd_mvcc_put_total ") })
	if puts < float64(b.N)/4 {
		b.Errorf("the second etcd made %v puts for %d cycles, about half of them its tenant's: the route was not taken", puts, b.N)
	}
	b.ReportMetric(took[1].Seconds()/took[2].Seconds(), "two-stores/one-store")
	b.ReportMetric(0, "ns/op")
}
