package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkRemote measures Lock+Release through the service (remotelock,
// h2c, Connect protocol) against the same store's backend used directly,
// on etcd, on Redis and on serve's default store (embedded: an etcd inside
// the service's process, which the direct path reaches through its
// socket), at 1, 16 and 64 concurrent callers, each on a key of its own,
// and at 16 callers on one key (contended). remote is remotelock's default
// transport (h2c, one connection); remote-h1 is remotelock over HTTP/1.1
// (a connection per concurrent call). On both etcds it also runs etcd's
// own lock service (etcd-lock: the v3lock Lock and Unlock
// calls etcdctl lock makes, served by the same etcd, each caller with a
// lease of its own, as etcdctl's session has), the peer a user would pick
// instead of the service. The paths run in alternating rounds, so that all
// see the same load on a shared machine. It reports for each path its
// throughput (ops/s) and median latency (p50-µs), the ratio of the
// service's throughput to the direct path's (remote/direct) and to etcd's
// lock service (remote/etcd-lock), the CPU the service's process and the
// callers' spent per cycle of each path (svc-cpu-µs/op, which on the
// embedded store includes etcd's; own-cpu-µs/op), and the median of a bare
// HTTP/2 round trip to the service on loopback (rtt-p50-µs), the yardstick
// of the service's overhead:
//
//	cd cmd/distlock && go test -run '^$' -bench BenchmarkRemote -benchtime 2000x ./internal/server
func BenchmarkRemote(b *testing.B) {
	for _, st := range append(remoteStores(b), embeddedStore(b)) {
		b.Run(st.name, func(b *testing.B) {
			svc := startRemoteService(b, st)
			direct := distlock.New(st.backend(b))
			remote := distlock.New(remoteBackendAt(b, svc.addr, remoteClient))
			h1 := &http.Transport{MaxIdleConnsPerHost: 256}
			rb1, err := remotelock.New(&http.Client{Transport: h1}, svc.url, remotelock.WithToken(remoteClient))
			if err != nil {
				b.Fatal(err)
			}
			remote1 := distlock.New(rb1)
			b.Cleanup(func() {
				_ = direct.Close()
				_ = remote.Close()
				_ = remote1.Close()
				h1.CloseIdleConnections()
			})
			paths := []benchPath{clientPath("direct", direct), clientPath("remote", remote), clientPath("remote-h1", remote1)}
			switch st.name {
			case "etcd":
				paths = append(paths, etcdLockPath(b, st.addr, 64))
			case "embedded":
				paths = append(paths, etcdLockPath(b, embeddedEndpoint(st.addr), 64))
			}
			rtt := remoteRTT(b, svc.url)
			for _, shape := range []struct {
				callers   int
				contended bool
			}{{1, false}, {16, false}, {64, false}, {16, true}} {
				name := fmt.Sprintf("callers=%d", shape.callers)
				if shape.contended {
					name += "/one-key"
				}
				b.Run(name, func(b *testing.B) {
					took, ok := remoteRounds(b, paths, st.name, shape.callers, shape.contended, svc.pid)
					if !ok {
						return
					}
					for i, p := range paths {
						if i != 1 { // the service's throughput over this path's
							b.ReportMetric(took[i].Seconds()/took[1].Seconds(), "remote/"+p.name)
						}
					}
					b.ReportMetric(float64(rtt.Nanoseconds())/1e3, "rtt-p50-µs")
					b.ReportMetric(0, "ns/op") // the paths' own metrics say it
				})
			}
		})
	}
}

// remoteRounds makes b.N Lock+Release cycles on each path from callers
// callers, the paths taking turns in rounds so that all see the same load,
// and reports each path's throughput and median. With pids (the service
// processes') it also reports the CPU those processes and this one (the
// callers') spent per cycle of each path. It returns each path's time, and
// false if a cycle failed.
func remoteRounds(b *testing.B, paths []benchPath, store string, callers int, contended bool, pids ...int) ([]time.Duration, bool) {
	lat := make([][]time.Duration, len(paths))
	took := make([]time.Duration, len(paths))
	svcCPU := make([]time.Duration, len(paths))
	ownCPU := make([]time.Duration, len(paths))
	cpu := func() (svc, own time.Duration) {
		for _, pid := range pids {
			svc += procCPU(b, pid)
		}
		return svc, procCPU(b, os.Getpid())
	}
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(b.N-done, 50*callers)
		for i, p := range paths {
			svc0, own0 := cpu()
			d, l := remoteRound(b, p, store, callers, n, contended)
			svc1, own1 := cpu()
			took[i] += d
			lat[i] = append(lat[i], l...)
			svcCPU[i] += svc1 - svc0
			ownCPU[i] += own1 - own0
		}
		if b.Failed() {
			return nil, false
		}
		done += n
	}
	b.StopTimer()
	for i, p := range paths {
		b.ReportMetric(float64(b.N)/took[i].Seconds(), p.name+"-ops/s")
		b.ReportMetric(float64(median(lat[i]).Nanoseconds())/1e3, p.name+"-p50-µs")
		if len(pids) > 0 {
			b.ReportMetric(float64(svcCPU[i].Microseconds())/float64(b.N), p.name+"-svc-cpu-µs/op")
			b.ReportMetric(float64(ownCPU[i].Microseconds())/float64(b.N), p.name+"-own-cpu-µs/op")
		}
	}
	return took, true
}

// benchPath is one way of taking and releasing a lock in BenchmarkRemote.
type benchPath struct {
	name string
	// cycle locks key, waiting for it, and releases it, as caller.
	cycle func(ctx context.Context, caller int, key string) error
}

// clientPath is Lock+Release through cs, caller i through cs[i mod len(cs)].
func clientPath(name string, cs ...*distlock.Client) benchPath {
	return benchPath{name: name, cycle: func(ctx context.Context, caller int, key string) error {
		l, err := cs[caller%len(cs)].Lock(ctx, key, distlock.WithWait(5*time.Second))
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}}
}

// etcdLockPath is Lock+Unlock through etcd's own lock service at endpoint,
// over one client connection, for up to callers callers, each with a lease
// of its own kept alive while b runs.
func etcdLockPath(b *testing.B, endpoint string, callers int) benchPath {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() {
		cancel()
		_ = cli.Close()
	})
	leases := make([]clientv3.LeaseID, callers)
	for i := range leases {
		g, err := cli.Grant(ctx, 60)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.KeepAlive(ctx, g.ID); err != nil {
			b.Fatal(err)
		}
		leases[i] = g.ID
	}
	locks := v3lockpb.NewLockClient(cli.ActiveConnection())
	return benchPath{name: "etcd-lock", cycle: func(ctx context.Context, caller int, key string) error {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := locks.Lock(wctx, &v3lockpb.LockRequest{Name: []byte(key), Lease: int64(leases[caller])})
		if err != nil {
			return err
		}
		_, err = locks.Unlock(ctx, &v3lockpb.UnlockRequest{Key: l.Key})
		return err
	}}
}

// remoteRound makes n Lock+Release cycles on p from callers goroutines,
// caller i on a key of its own unless contended, and returns the wall time
// they took and the latency of each.
func remoteRound(b *testing.B, p benchPath, store string, callers, n int, contended bool) (time.Duration, []time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		all  = make([]time.Duration, 0, n)
	)
	start := time.Now()
	for i := range callers {
		wg.Go(func() {
			key := fmt.Sprintf("bench/%s/%s/%d", p.name, store, i)
			if contended {
				key = fmt.Sprintf("bench/%s/%s/one", p.name, store)
			}
			mine := make([]time.Duration, 0, n/callers+1)
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				if err := p.cycle(ctx, i, key); err != nil {
					b.Errorf("%s: lock and release %s: %v", p.name, key, err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
		})
	}
	wg.Wait()
	return time.Since(start), all
}

// remoteRTT returns the median of 500 bare HTTP/2 round trips (GET
// /healthz) to the service at url, over a client of its own.
func remoteRTT(b *testing.B, url string) time.Duration {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	defer hc.CloseIdleConnections()
	lat := make([]time.Duration, 0, 500)
	for range 500 {
		t0 := time.Now()
		resp, err := hc.Get(url + "/healthz")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		lat = append(lat, time.Since(t0))
	}
	return median(lat)
}

// median returns the middle of d, which it sorts.
func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkRemoteLossNotice is locktest.LossNotice through the service, on
// each store: the holder's backend, built WithLossWatch, learns of a forced
// release from the service's event stream; the admin's forced release goes
// through the same service.
func BenchmarkRemoteLossNotice(b *testing.B) {
	for _, st := range remoteStores(b) {
		b.Run(st.name, func(b *testing.B) {
			svc := startRemoteService(b, st)
			holder := distlock.New(remoteBackendAt(b, svc.addr, remoteClient, remotelock.WithLossWatch()))
			defer holder.Close()
			operator := distlock.New(remoteBackendAt(b, svc.addr, remoteAdmin))
			defer operator.Close()
			// The stream starts with the first grant and misses what comes
			// before it is live: warm it up with a lock of its own.
			ctx := context.Background()
			warm, err := holder.TryLock(ctx, "loss-notice/warm")
			if err != nil {
				b.Fatal(err)
			}
			_ = warm.Release(ctx)
			time.Sleep(500 * time.Millisecond)
			locktest.LossNotice(b, holder, operator, 0)
		})
	}
}
