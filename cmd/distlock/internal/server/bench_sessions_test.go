package server_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkSessions holds sessions through the service (1 000, then
// 10 000, or 3 000 for etcd-3; each with one lock, so as many held locks),
// over an etcd of its
// own, over serve's default store (embedded, an etcd in the service's
// process) and through three instances over a 3-member etcd (etcd-3,
// session i through instance i mod 3), kept alive with a KeepAlive each a third of their TTL (30 s)
// apart, while a caller of another tenant makes Lock+Release cycles for a
// window of two KeepAlive rounds. It reports what a session costs the
// service (its RSS and CPU, read from /proc, summed over its instances;
// over the embedded store, the store's CPU is the service's) and etcd (its
// CPU, from its metrics, summed over its members), the
// KeepAlive latencies, and the other caller's p50 and p99 with the
// sessions and without them, just before:
//
//	cd cmd/distlock && go test -run '^$' -bench BenchmarkSessions -benchtime 1x -timeout 30m ./internal/server
func BenchmarkSessions(b *testing.B) {
	for _, store := range []string{"etcd", "embedded", "etcd-3"} {
		sizes := []int{1000, 10000}
		if store == "etcd-3" {
			// Three members and three instances share this machine's two
			// cores: at 10 000 sessions KeepAlives fall behind their TTL.
			sizes = []int{1000, 3000}
		}
		for _, n := range sizes {
			b.Run(fmt.Sprintf("%s/sessions=%d", store, n), func(b *testing.B) { benchmarkSessions(b, store, n) })
		}
	}
}

func benchmarkSessions(b *testing.B, store string, n int) {
	const (
		ttl     = 30 * time.Second
		window  = 2 * ttl / 3 // two KeepAlive rounds
		openers = 32
		keepers = 256 // so that the benchmark's own pace is not the limit
	)
	st, instances := embeddedStore(b), 1
	var members []string // etcd's endpoints; none for the embedded store, whose CPU is the service's
	switch store {
	case "etcd":
		members = []string{testserver.EtcdEndpoint(testserver.Etcd(b))}
	case "etcd-3":
		for _, m := range testserver.EtcdCluster(b, 3) {
			members = append(members, testserver.EtcdEndpoint(m))
		}
		instances = 3
	}
	if members != nil {
		st = remoteStore{"etcd", strings.Join(members, ",")}
	}
	etcdCPUOf := func() (d time.Duration) {
		for _, m := range members {
			d += etcdCPU(b, m)
		}
		return d
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	b.Cleanup(hc.CloseIdleConnections)
	svcs := make([]*remoteService, instances)
	apis := make([]distlockv1connect.LockServiceClient, instances)
	for i := range svcs {
		svcs[i] = startRemoteServiceEnv(b, st)
		apis[i] = distlockv1connect.NewLockServiceClient(hc, svcs[i].url, connect.WithInterceptors(bearer(remoteClient)))
	}
	// What the instances use together, read from /proc.
	svcRSS := func() (rss int64) {
		for _, svc := range svcs {
			rss += procRSS(b, svc.pid)
		}
		return rss
	}
	svcCPU := func() (d time.Duration) {
		for _, svc := range svcs {
			d += procCPU(b, svc.pid)
		}
		return d
	}
	probe := distlock.New(remoteBackendAt(b, svcs[0].addr, remoteOther))
	b.Cleanup(func() { _ = probe.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	idle := probeFor(b, ctx, probe, 5*time.Second)
	rss0 := svcRSS()

	// Open the sessions, each with a lock.
	ids := make([]string, n)
	opened := time.Now()
	var wg sync.WaitGroup
	for w := range openers {
		wg.Go(func() {
			for i := w; i < n && !b.Failed(); i += openers {
				api := apis[i%instances]
				res, err := api.OpenSession(ctx, connect.NewRequest(&distlockv1.OpenSessionRequest{Ttl: durationpb.New(ttl)}))
				if err != nil {
					b.Errorf("OpenSession: %v", err)
					return
				}
				ids[i] = res.Msg.GetSessionId()
				if _, err := api.Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{Key: fmt.Sprintf("held/%05d", i), SessionId: ids[i]})); err != nil {
					b.Errorf("Acquire in a session: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	setup := time.Since(opened)

	// Keep them alive: session i at i/n of each third of the TTL.
	keep, stopKeeping := context.WithCancel(ctx)
	var (
		mu        sync.Mutex
		keepLat   []time.Duration
		keepFails int
		firstFail error
	)
	round := ttl / 3
	start := time.Now()
	for w := range keepers {
		wg.Go(func() {
			for r := 0; keep.Err() == nil; r++ {
				for i := w; i < n; i += keepers {
					at := start.Add(time.Duration(r)*round + time.Duration(i)*round/time.Duration(n))
					select {
					case <-keep.Done():
						return
					case <-time.After(time.Until(at)):
					}
					t0 := time.Now()
					res, err := apis[i%instances].KeepAlive(keep, connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: ids[i]}))
					mu.Lock()
					if err == nil && res.Msg.GetLocks() != 1 {
						err = fmt.Errorf("%d locks renewed", res.Msg.GetLocks())
					}
					if err != nil {
						if keep.Err() == nil {
							keepFails++
							firstFail = cmp.Or(firstFail, err)
						}
					} else {
						keepLat = append(keepLat, time.Since(t0))
					}
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(round) // one round before measuring
	mu.Lock()
	keepLat = keepLat[:0]
	mu.Unlock()
	rss := svcRSS()
	cpu0, ecpu0, t0 := svcCPU(), etcdCPUOf(), time.Now()
	b.ResetTimer()
	busy := probeFor(b, ctx, probe, window)
	b.StopTimer()
	cpu, ecpu, took := svcCPU()-cpu0, etcdCPUOf()-ecpu0, time.Since(t0)
	stopKeeping()
	wg.Wait()

	mu.Lock()
	keeps, lat, fails := len(keepLat), keepLat, keepFails
	mu.Unlock()
	if fails > 0 {
		b.Errorf("%d KeepAlives failed or renewed no lock, the first: %v", fails, firstFail)
	}
	b.ReportMetric(float64(2*n)/setup.Seconds(), "opens+acquires/s")
	b.ReportMetric(float64(rss-rss0)/1024/float64(n), "service-KiB/session")
	b.ReportMetric(float64(keeps)/took.Seconds(), "keepalives/s")
	b.ReportMetric(ms(percentile(lat, 0.5)), "keepalive-p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "keepalive-p99-ms")
	b.ReportMetric(cpu.Seconds()/took.Seconds(), "service-cores")
	if members != nil {
		b.ReportMetric(ecpu.Seconds()/took.Seconds(), "etcd-cores")
	}
	if keeps > 0 {
		b.ReportMetric(cpu.Seconds()*1e6/float64(keeps), "service-cpu-µs/keepalive")
		if members != nil {
			b.ReportMetric(ecpu.Seconds()*1e6/float64(keeps), "etcd-cpu-µs/keepalive")
		}
	}
	b.ReportMetric(ms(percentile(idle, 0.99)), "idle-p99-ms")
	b.ReportMetric(ms(percentile(busy, 0.5)), "busy-p50-ms")
	b.ReportMetric(ms(percentile(busy, 0.99)), "busy-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// probeFor makes Lock+Release cycles through c on a key of its own for d
// and returns their latencies.
func probeFor(b *testing.B, ctx context.Context, c *distlock.Client, d time.Duration) []time.Duration {
	var lat []time.Duration
	for end := time.Now().Add(d); time.Now().Before(end); {
		lat = append(lat, probeCycles(b, ctx, c, 1)...)
		time.Sleep(10 * time.Millisecond) // a caller's pace, not a flood
	}
	return lat
}

// procRSS returns the resident memory of process pid, in bytes.
func procRSS(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb * 1024
		}
	}
	b.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// procCPU returns the CPU time process pid has used, user and system.
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses:
	// utime and stime are the 12th and 13th, in clock ticks (100 a second).
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	var ticks int64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
