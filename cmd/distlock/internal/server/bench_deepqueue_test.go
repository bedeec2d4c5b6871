package server_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkDeepQueue measures waiting at scale through the service, over
// an etcd of its own and over serve's default store (embedded, an etcd in
// the service's process): callers of one tenant (16, 1 000, then 5 000,
// arriving at 100 a second) loop Lock and Release on one key, so that
// every handoff happens behind a queue that deep, while a caller of
// another tenant makes b.N Lock+Release cycles on a key of its own. It
// reports the other tenant's p50 and p99 with the queue (busy-p50-ms,
// busy-p99-ms) and without it, just before (idle-p50-ms, idle-p99-ms),
// their p99 ratio (p99-busy/idle), the queue's handoffs per second, and
// the store's CPU per handoff, which stays flat when a handoff's store work
// does not grow with the queue: etcd's (etcd-cpu-µs/handoff, from its
// process_cpu_seconds_total), or the service's process with its embedded
// etcd (service-cpu-µs/handoff, from /proc):
//
//	cd cmd/distlock && go test -run '^$' -bench BenchmarkDeepQueue -benchtime 300x -timeout 30m ./internal/server
func BenchmarkDeepQueue(b *testing.B) {
	const most = 5000
	for _, st := range []remoteStore{{"etcd", testserver.EtcdEndpoint(testserver.Etcd(b))}, embeddedStore(b)} {
		b.Run(st.name, func(b *testing.B) {
			svc := startRemoteServiceEnv(b, st, remoteWaitersEnv+"="+strconv.Itoa(most+16))
			queue := distlock.New(remoteBackendAt(b, svc.addr, remoteClient))
			probe := distlock.New(remoteBackendAt(b, svc.addr, remoteOther))
			b.Cleanup(func() {
				_ = queue.Close()
				_ = probe.Close()
			})
			cpu, cpuUnit := func() time.Duration { return etcdCPU(b, st.addr) }, "etcd-cpu-µs/handoff"
			if st.name == "embedded" {
				cpu, cpuUnit = func() time.Duration { return procCPU(b, svc.pid) }, "service-cpu-µs/handoff"
			}
			for _, depth := range []int{16, 1000, most} {
				b.Run(fmt.Sprintf("waiters=%d", depth), func(b *testing.B) {
					deepQueue(b, queue, probe, depth, cpu, cpuUnit)
				})
			}
		})
	}
}

// deepQueue runs BenchmarkDeepQueue's shape of depth callers through
// queue, b.N cycles through probe, reading the store's CPU with cpu.
func deepQueue(b *testing.B, queue, probe *distlock.Client, depth int, cpu func() time.Duration, cpuUnit string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	idle := probeCycles(b, ctx, probe, b.N)
	loop, stop := context.WithCancel(ctx)
	var handoffs atomic.Int64
	var started sync.WaitGroup
	var wg sync.WaitGroup
	key := fmt.Sprintf("deep-%d", depth)
	for range depth {
		// Callers arrive at 100 a second: a burst of thousands of
		// enqueues (a lease grant and a put each) makes etcd refuse
		// proposals ("too many requests").
		time.Sleep(10 * time.Millisecond)
		started.Add(1)
		wg.Go(func() {
			first := true
			for loop.Err() == nil {
				l, err := queue.Lock(loop, key, distlock.WithWait(15*time.Minute))
				if first {
					started.Done()
					first = false
				}
				if err != nil {
					if loop.Err() == nil {
						b.Errorf("a waiter: %v", err)
					}
					return
				}
				handoffs.Add(1)
				if err := l.Release(ctx); err != nil {
					b.Errorf("a release: %v", err)
					return
				}
			}
		})
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	// Every caller has queued once the queue has handed the key to each
	// of them; then the queue is as deep as it gets.
	started.Wait()
	if b.Failed() {
		return
	}
	cpu0, n0, t0 := cpu(), handoffs.Load(), time.Now()
	b.ResetTimer()
	busy := probeCycles(b, ctx, probe, b.N)
	b.StopTimer()
	used, n, took := cpu()-cpu0, handoffs.Load()-n0, time.Since(t0)
	b.ReportMetric(ms(percentile(idle, 0.5)), "idle-p50-ms")
	b.ReportMetric(ms(percentile(idle, 0.99)), "idle-p99-ms")
	b.ReportMetric(ms(percentile(busy, 0.5)), "busy-p50-ms")
	b.ReportMetric(ms(percentile(busy, 0.99)), "busy-p99-ms")
	b.ReportMetric(float64(percentile(busy, 0.99))/float64(percentile(idle, 0.99)), "p99-busy/idle")
	b.ReportMetric(float64(n)/took.Seconds(), "handoffs/s")
	if n > 0 {
		b.ReportMetric(used.Seconds()*1e6/float64(n), cpuUnit)
	}
	b.ReportMetric(0, "ns/op")
}

// probeCycles makes n Lock+Release cycles through c on a key of its own and
// returns their latencies.
func probeCycles(b *testing.B, ctx context.Context, c *distlock.Client, n int) []time.Duration {
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		l, err := c.Lock(ctx, "probe", distlock.WithWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	return lat
}

// etcdCPU reads the CPU time the etcd server at endpoint has used, from its
// metrics.
func etcdCPU(b *testing.B, endpoint string) time.Duration {
	s := etcdMetric(b, endpoint, func(l string) bool { return strings.HasPrefix(l, "process_cpu_seconds_total ") })
	return time.Duration(s * float64(time.Second))
}

// percentile returns the q-th quantile of d, which it sorts.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
