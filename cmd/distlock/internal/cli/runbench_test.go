package cli

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkRunForceReleased measures how soon `distlock run` stops its
// command after a forced release, on every store that tells a holder at
// once, and on MySQL, which tells at its keepalive: b.N times a run starts
// a command under a key, the command runs 200 ms (past the 100 ms after
// which etcd and ZooKeeper holders watch their hold), and an operator's
// client in this process force-releases the key. The time runs from just
// before the forced release is sent to run's exit, which follows the
// command's (SIGTERM, no trap). It reports p50, p99 and max.
//
//	cd cmd/distlock && go test -run '^$' -bench RunForceReleased -benchtime 20x ./internal/cli/
func BenchmarkRunForceReleased(b *testing.B) {
	bin := buildDistlock(b)
	for _, st := range []struct {
		name string
		// run is the URL run uses; operator the one the forced release
		// uses, which may allow it.
		run, operator func(b *testing.B) (run, operator string)
	}{
		{name: "redis", run: func(b *testing.B) (string, string) {
			u := "redis://" + testserver.Redis(b).Addr()
			return u, u
		}},
		{name: "etcd", run: func(b *testing.B) (string, string) {
			u := "etcd://" + testserver.Etcd(b).Addr()
			return u, u
		}},
		{name: "zookeeper", run: func(b *testing.B) (string, string) {
			u := "zk://" + testserver.ZooKeeper(b).Addr()
			return u, u
		}},
		{name: "service", run: func(b *testing.B) (string, string) {
			p := startServe(b, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", b.TempDir())
			u := "distlock://" + p.banner.Listen
			return u, u
		}},
		{name: "postgres", run: func(b *testing.B) (string, string) {
			u := testserver.PostgresDSN(testserver.Postgres(b))
			return u, u + "&terminate_on_force_release=true"
		}},
		{name: "mysql", run: func(b *testing.B) (string, string) {
			u := "mysql://root@" + testserver.MariaDB(b).Addr() + "/distlock?timeout=5s"
			return u, u + "&kill_on_force_release=true"
		}},
	} {
		b.Run(st.name, func(b *testing.B) {
			runURL, operatorURL := st.run(b)
			ctx := context.Background()
			operator, err := distlock.Open(ctx, operatorURL)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = operator.Close() })
			env := []string{"DISTLOCK_BACKEND=" + runURL}
			took := make([]time.Duration, 0, b.N)
			for i := range b.N {
				dir, key := b.TempDir(), fmt.Sprintf("forced-%d", i)
				p := startDistlock(b, bin, env, "", "run", "--key", key, "--", "sh", "-c", waitingJob(dir, ""))
				awaitStart(b, dir)
				time.Sleep(200 * time.Millisecond)
				released := make(chan error, 1)
				start := time.Now()
				go func() {
					_, err := operator.ForceRelease(ctx, key, "benchmark")
					released <- err
				}()
				r := p.mustWait(b, processTimeout)
				took = append(took, time.Since(start))
				if err := <-released; err != nil {
					b.Fatal(err)
				}
				if r.code != ExitLockLost {
					b.Fatalf("run exited %d, want %d: %s", r.code, ExitLockLost, r.stderr)
				}
			}
			slices.Sort(took)
			ms := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))].Microseconds()) / 1000 }
			b.ReportMetric(ms(0.5), "p50-ms")
			b.ReportMetric(ms(0.99), "p99-ms")
			b.ReportMetric(ms(1), "max-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
