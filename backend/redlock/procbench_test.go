package redlock_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/childproc"
	"github.com/distlock/distlock/internal/testserver"
)

// The multi-process benchmark: every client is an OS process of its own
// (this test binary, run again), with one Redlock of its own, as replicas
// of a service are.
var (
	procOwnKeys = flag.String("procbench.keys", "4x16,16x1", "BenchmarkRedlockProcesses: comma-separated clients x goroutines, each goroutine on a key of its own")
	procOneKey  = flag.String("procbench.one", "6x1,3x2", "BenchmarkRedlockProcesses: comma-separated clients x goroutines, all on one key")
	procRound   = flag.Duration("procbench.round", 2*time.Second, "BenchmarkRedlockProcesses: length of one round")
	procRounds  = flag.Int("procbench.rounds", 2, "BenchmarkRedlockProcesses: rounds of each kind per layout, alternating")
)

// childEnv carries a client process's job (JSON).
const childEnv = "REDLOCK_TEST_CHILD"

// procJob is what a client process does for one round.
type procJob struct {
	Raw        bool     // the raw scripts (rawRedlock), spinning on a split, instead of distlock over Redlock
	Addrs      []string // the nodes
	Key        string   // the key all goroutines take turns on, or with OwnKeys the prefix of each one's own
	OwnKeys    bool
	Goroutines int
	Work       time.Duration // outside the lock, after each release
	Round      time.Duration
}

// procResult is what a client process reports: every wait (µs), per
// goroutine, and the CPU time the process used in the round.
type procResult struct {
	Waits  [][]int64
	CPU    time.Duration
	Errors []string
}

// lockWait bounds one acquisition: a round never waits longer.
const lockWait = 10 * time.Second

func (job procJob) run() error {
	ctx := context.Background()
	take, closeAll, err := job.taker(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	// Warm up the connections and scripts on a key of this process's own.
	if _, err := take(ctx, fmt.Sprintf("%s/warm/%d", job.Key, os.Getpid()), "warm"); err != nil {
		return err
	}
	childproc.Ready()
	if err := childproc.AwaitGo(); err != nil {
		return err
	}
	cpu, err := cpuTime()
	if err != nil {
		return err
	}
	end := time.Now().Add(job.Round)
	res := procResult{Waits: make([][]int64, job.Goroutines)}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for g := range job.Goroutines {
		key, token := job.Key, fmt.Sprintf("%d-%d", os.Getpid(), g)
		if job.OwnKeys {
			key += "/" + token
		}
		wg.Go(func() {
			for time.Now().Before(end) {
				w, err := take(ctx, key, token)
				if err != nil {
					mu.Lock()
					res.Errors = append(res.Errors, err.Error())
					mu.Unlock()
					return
				}
				res.Waits[g] = append(res.Waits[g], w.Microseconds())
				time.Sleep(job.Work)
			}
		})
	}
	wg.Wait()
	after, err := cpuTime()
	if err != nil {
		return err
	}
	res.CPU = after - cpu
	return childproc.Report(res)
}

// taker returns take, which acquires key (token is the raw kind's), then
// releases it, and returns how long the acquisition took; and the closer of
// what it opened.
func (job procJob) taker(ctx context.Context) (take func(ctx context.Context, key, token string) (time.Duration, error), closeAll func(), err error) {
	if !job.Raw {
		c, err := distlock.Open(ctx, redlockURL(job.Addrs, ""))
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, key, _ string) (time.Duration, error) {
			start := time.Now()
			l, err := c.Lock(ctx, key, distlock.WithWait(lockWait))
			if err != nil {
				return 0, err
			}
			w := time.Since(start)
			return w, l.Release(ctx)
		}, func() { _ = c.Close() }, nil
	}
	clients := make([]rueidis.Client, len(job.Addrs))
	closeAll = func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}
	for i, a := range job.Addrs {
		if clients[i], err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: true}); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	raw, err := newRawRedlock(clients)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	quorum := len(clients)/2 + 1
	// A spin: on a split or a held key, free what was taken and try again
	// at once, until a majority grants or the wait is over.
	return func(ctx context.Context, key, token string) (time.Duration, error) {
		start := time.Now()
		for {
			n, err := raw.lock(ctx, key, token)
			if err != nil {
				return 0, err
			}
			if n >= quorum {
				break
			}
			if n > 0 {
				if err := raw.unlock(ctx, key, token); err != nil {
					return 0, err
				}
			}
			if time.Since(start) > lockWait {
				return 0, fmt.Errorf("spin: not acquired within %v", lockWait)
			}
		}
		w := time.Since(start)
		return w, raw.unlock(ctx, key, token)
	}, closeAll, nil
}

// cpuTime is the CPU time, user and system, this process has used.
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// procRun is what the rounds of one kind measured, together.
type procRun struct {
	clients   [][]int64 // waits (µs) per client
	elapsed   time.Duration
	clientCPU time.Duration // the client processes'
	nodeCPU   time.Duration // the five redis-servers'
}

// round runs one client process per job for one round and adds what they
// did to r.
func (r *procRun) round(b *testing.B, addrs []string, job procJob, clients int) {
	cs := childproc.StartAll(b, childEnv, slices.Repeat([]procJob{job}, clients), time.Minute)
	nodeCPU := func() time.Duration {
		var sum time.Duration
		for _, a := range addrs {
			cpu, err := testserver.RedisCPU(context.Background(), a)
			if err != nil {
				b.Fatal(err)
			}
			sum += cpu
		}
		return sum
	}
	before := nodeCPU()
	for _, c := range cs {
		if err := c.Go(); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	if r.clients == nil {
		r.clients = make([][]int64, clients)
	}
	for i, c := range cs {
		var res procResult
		c.Result(b, &res)
		if len(res.Errors) > 0 {
			b.Fatalf("client process failed: %v", res.Errors)
		}
		r.clients[i] = append(r.clients[i], slices.Concat(res.Waits...)...)
		r.clientCPU += res.CPU
	}
	r.elapsed += time.Since(start) - job.Work // the last iteration's work is not the stores'
	r.nodeCPU += nodeCPU() - before
}

// report reports r's figures under prefix: acquisitions per second, the
// wait's p50 and p99 over all (µs), the largest and smallest client share
// ÷ the fair share, and the client processes' and the nodes' CPU time per
// acquisition (µs).
func (r procRun) report(b *testing.B, prefix string) float64 {
	all := slices.Concat(r.clients...)
	slices.Sort(all)
	n := len(all)
	if n == 0 {
		b.Fatalf("%s: no acquisition in %v", prefix, r.elapsed)
	}
	maxShare, minShare := 0.0, float64(len(r.clients))
	for _, c := range r.clients {
		share := float64(len(c)) * float64(len(r.clients)) / float64(n)
		maxShare, minShare = max(maxShare, share), min(minShare, share)
	}
	rate := float64(n) / r.elapsed.Seconds()
	b.ReportMetric(rate, prefix+"acq/s")
	b.ReportMetric(float64(all[n/2]), prefix+"p50-µs")
	b.ReportMetric(float64(all[min(n-1, n*99/100)]), prefix+"p99-µs")
	b.ReportMetric(maxShare, prefix+"max-share/fair")
	b.ReportMetric(minShare, prefix+"min-share/fair")
	b.ReportMetric(float64(r.clientCPU.Microseconds())/float64(n), prefix+"client-cpu-µs/acq")
	b.ReportMetric(float64(r.nodeCPU.Microseconds())/float64(n), prefix+"nodes-cpu-µs/acq")
	return rate
}

// BenchmarkRedlockProcesses runs Redlock on five nodes from N client
// processes of P goroutines each, each process with its own Redlock, in two
// shapes: "keys", every goroutine locking and releasing a key of its own
// (throughput), and "one", all of them taking turns on one key with WithWait
// and 1 ms of work outside the lock after each release (contention across
// clients). Rounds alternate with the raw kind in the same processes'
// shape: the same redislock scripts sent to the five nodes in parallel by
// a plain rueidis client per node (rawRedlock), which on one key spins:
// after a split or a refusal it frees what it took and tries again at once.
// It ignores b.N: run it with -benchtime 1x. Flags: -procbench.keys,
// -procbench.one, -procbench.round, -procbench.rounds.
//
// Reported per kind (the raw one prefixed raw-): acquisitions/s, p50 and
// p99 wait, the largest and smallest client share ÷ the fair share, client
// and node CPU per acquisition; and acq/s-vs-raw, Redlock's rate over the
// raw one's.
func BenchmarkRedlockProcesses(b *testing.B) {
	addrs := addrsOf(nodes(b, 5))
	for _, shape := range []struct {
		name    string
		own     bool
		layouts string
		work    time.Duration
	}{{"keys", true, *procOwnKeys, 0}, {"one", false, *procOneKey, time.Millisecond}} {
		for layout := range strings.SplitSeq(shape.layouts, ",") {
			var clients, g int
			if _, err := fmt.Sscanf(layout, "%dx%d", &clients, &g); err != nil || clients < 1 || g < 1 {
				b.Fatalf("layout %q: want clients x goroutines, such as 4x16", layout)
			}
			b.Run(shape.name+"/"+layout, func(b *testing.B) {
				var lock, raw procRun
				for i := range *procRounds {
					job := procJob{Addrs: addrs, OwnKeys: shape.own, Goroutines: g, Work: shape.work, Round: *procRound}
					job.Key = fmt.Sprintf("procbench/%s/%d/lock", b.Name(), i)
					lock.round(b, addrs, job, clients)
					job.Raw, job.Key = true, fmt.Sprintf("procbench/%s/%d/raw", b.Name(), i)
					raw.round(b, addrs, job, clients)
				}
				rate, rawRate := lock.report(b, ""), raw.report(b, "raw-")
				b.ReportMetric(rate/rawRate, "acq/s-vs-raw")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
