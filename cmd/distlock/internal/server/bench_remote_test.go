package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
)

// BenchmarkRemote measures Lock+Release through the service (remotelock,
// h2c, Connect protocol) against the same store's backend used directly,
// on etcd and on Redis, at 1, 16 and 64 concurrent callers, each on a key
// of its own. remote is remotelock's default transport (h2c, one
// connection); remote-h1 is remotelock over HTTP/1.1 (a connection per
// concurrent call). The paths run in alternating rounds, so that all see
// the same load on a shared machine. It reports for each path its
// throughput (ops/s) and median latency (p50-µs), the ratio of a remote
// path's throughput to the direct one's (remote/direct), and the median of
// a bare HTTP/2 round trip to the service on loopback (rtt-p50-µs), the
// yardstick of the service's overhead:
//
//	cd cmd/distlock && go test -run '^$' -bench BenchmarkRemote -benchtime 2000x ./internal/server
func BenchmarkRemote(b *testing.B) {
	for _, st := range remoteStores(b) {
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
			rtt := remoteRTT(b, svc.url)
			for _, callers := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
					paths := []*distlock.Client{direct, remote, remote1}
					lat := make([][]time.Duration, len(paths))
					took := make([]time.Duration, len(paths))
					b.ResetTimer()
					for done := 0; done < b.N; {
						n := min(b.N-done, 50*callers)
						for i, c := range paths {
							d, l := remoteRound(b, c, st.name, callers, n)
							took[i] += d
							lat[i] = append(lat[i], l...)
						}
						if b.Failed() {
							return
						}
						done += n
					}
					b.StopTimer()
					for i, name := range []string{"direct", "remote", "remote-h1"} {
						b.ReportMetric(float64(b.N)/took[i].Seconds(), name+"-ops/s")
						b.ReportMetric(float64(median(lat[i]).Nanoseconds())/1e3, name+"-p50-µs")
					}
					b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "remote/direct")
					b.ReportMetric(took[0].Seconds()/took[2].Seconds(), "remote-h1/direct")
					b.ReportMetric(float64(rtt.Nanoseconds())/1e3, "rtt-p50-µs")
					b.ReportMetric(0, "ns/op") // the paths' own metrics say it
				})
			}
		})
	}
}

// remoteRound makes n Lock+Release calls on c from callers goroutines,
// caller i on a key of its own, and returns the wall time they took and
// the latency of each.
func remoteRound(b *testing.B, c *distlock.Client, store string, callers, n int) (time.Duration, []time.Duration) {
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
			key := fmt.Sprintf("bench/%s/%d", store, i)
			mine := make([]time.Duration, 0, n/callers+1)
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				l, err := c.Lock(ctx, key, distlock.WithWait(5*time.Second))
				if err != nil {
					b.Errorf("lock %s: %v", key, err)
					return
				}
				if err := l.Release(ctx); err != nil {
					b.Errorf("release %s: %v", key, err)
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
