package redislock_test

import (
	"context"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/childproc"
	"github.com/distlock/distlock/internal/testserver"
)

// The multi-process benchmark: every client is an OS process of its own (this
// test binary, run again with childEnv set), as replicas of a service are.
var (
	procTopologies = flag.String("procbench.topology", "single", "BenchmarkRedisProcesses: comma-separated deployments: single, cluster, sentinel")
	procLayouts    = flag.String("procbench.layouts", "16x1,4x4,2x8,1x16", "BenchmarkRedisProcesses: comma-separated clients x goroutines")
	procRound      = flag.Duration("procbench.round", 2*time.Second, "BenchmarkRedisProcesses: length of one round")
	procRounds     = flag.Int("procbench.rounds", 2, "BenchmarkRedisProcesses: rounds of each kind per layout, alternating")
)

// childEnv carries a child's job (JSON) when the test binary runs as one of
// the benchmark's or a test's client processes.
const childEnv = "REDISLOCK_TEST_CHILD"

// childJob is what a client process does.
type childJob struct {
	Mode       string   // "distlock", "spin" or "wait" (lock once, hold until killed)
	URL        string   // for distlock.Open
	Addrs      []string // for the raw rueidis client of spin
	MasterSet  string   // Sentinel's master name, for spin
	Key        string
	Goroutines int
	Work       time.Duration // outside the lock, after each release
	Wait       time.Duration // WithWait
	Lease      time.Duration // WithLease
	Round      time.Duration // how long to run after "go"
}

// childResult is what a client process reports: every wait, per goroutine,
// in µs.
type childResult struct {
	Waits  [][]int64
	Errors []string
}

func (job childJob) run() error {
	ctx := context.Background()
	var op func(ctx context.Context, token string) (time.Duration, error)
	switch job.Mode {
	case "distlock", "wait":
		c, err := distlock.Open(ctx, job.URL)
		if err != nil {
			return err
		}
		defer c.Close()
		lock := func(ctx context.Context, key string) (time.Duration, *distlock.Lock, error) {
			start := time.Now()
			l, err := c.Lock(ctx, key, distlock.WithWait(job.Wait), distlock.WithLease(job.Lease))
			return time.Since(start), l, err
		}
		if job.Mode == "wait" {
			childproc.Ready()
			_, l, err := lock(ctx, job.Key)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
			return l.Release(ctx)
		}
		// Warm up connections and scripts on a key of this process's own.
		if _, l, err := lock(ctx, job.Key+"/warm/"+strconv.Itoa(os.Getpid())); err != nil {
			return err
		} else if err := l.Release(ctx); err != nil {
			return err
		}
		op = func(ctx context.Context, _ string) (time.Duration, error) {
			w, l, err := lock(ctx, job.Key)
			if err != nil {
				return 0, err
			}
			return w, l.Release(ctx)
		}
	case "spin":
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: job.Addrs, DisableCache: true,
			Sentinel: rueidis.SentinelOption{MasterSet: job.MasterSet}})
		if err != nil {
			return err
		}
		defer c.Close()
		release := rueidis.NewLuaScript(floorReleaseLua)
		set := func(ctx context.Context, key, token string) (bool, error) {
			err := c.Do(ctx, c.B().Set().Key(key).Value(token).Nx().PxMilliseconds(job.Lease.Milliseconds()).Build()).Error()
			if rueidis.IsRedisNil(err) {
				return false, nil
			}
			return err == nil, err
		}
		spin := func(ctx context.Context, key, token string) (time.Duration, error) {
			start := time.Now()
			for {
				ok, err := set(ctx, key, token)
				if err != nil {
					return 0, err
				}
				if ok {
					break
				}
				if time.Since(start) > job.Wait {
					return 0, fmt.Errorf("spin: not acquired within %v", job.Wait)
				}
			}
			w := time.Since(start)
			return w, release.Exec(ctx, c, []string{key}, []string{token}).Error()
		}
		if _, err := spin(ctx, job.Key+"/warm/"+strconv.Itoa(os.Getpid()), "warm"); err != nil {
			return err
		}
		op = func(ctx context.Context, token string) (time.Duration, error) { return spin(ctx, job.Key, token) }
	default:
		return fmt.Errorf("unknown mode %q", job.Mode)
	}

	childproc.Ready()
	if err := childproc.AwaitGo(); err != nil {
		return err
	}
	end := time.Now().Add(job.Round)
	res := childResult{Waits: make([][]int64, job.Goroutines)}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for g := range job.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			token := fmt.Sprintf("%d-%d", os.Getpid(), g)
			for time.Now().Before(end) {
				w, err := op(ctx, token)
				if err != nil {
					mu.Lock()
					res.Errors = append(res.Errors, err.Error())
					mu.Unlock()
					return
				}
				res.Waits[g] = append(res.Waits[g], w.Microseconds())
				time.Sleep(job.Work)
			}
		}()
	}
	wg.Wait()
	return childproc.Report(res)
}

// result reads a client process's report once it has run its round.
func result(tb testing.TB, c *childproc.Child) childResult {
	tb.Helper()
	var r childResult
	c.Result(tb, &r)
	if len(r.Errors) > 0 {
		tb.Fatalf("client process failed: %v", r.Errors)
	}
	return r
}

// procDeployment is one Redis deployment the benchmark runs against.
type procDeployment struct {
	url       string   // for distlock.Open
	addrs     []string // for the raw client
	masterSet string
	nodes     []string // data nodes, whose CPU and command counts are summed
}

func newProcDeployment(b *testing.B, topology string) procDeployment {
	switch topology {
	case "single":
		s := testserver.Redis(b)
		return procDeployment{url: "redis://" + s.Addr(), addrs: []string{s.Addr()}, nodes: []string{s.Addr()}}
	case "cluster":
		c := testserver.RedisCluster(b, 3)
		return procDeployment{url: "redis-cluster://" + c.Addrs()[0], addrs: c.Addrs(), nodes: c.Addrs()}
	case "sentinel":
		s := testserver.RedisSentinel(b)
		sn := s.SentinelAddrs()
		return procDeployment{
			url:   "redis-sentinel://" + sn[0] + "/" + testserver.SentinelMaster + "?addr=" + sn[1] + "&addr=" + sn[2],
			addrs: sn, masterSet: testserver.SentinelMaster,
			nodes: []string{s.Primary().Addr(), s.Replica().Addr()},
		}
	}
	b.Fatalf("unknown topology %q", topology)
	return procDeployment{}
}

// serverStats is what the data nodes report, summed.
type serverStats struct {
	cpu   time.Duration  // used_cpu_sys + used_cpu_user
	calls map[string]int // per command, from INFO commandstats
}

var cmdstatCalls = regexp.MustCompile(`(?m)^cmdstat_([a-z|]+):calls=(\d+)`)

func (d procDeployment) stats(tb testing.TB) serverStats {
	tb.Helper()
	st := serverStats{calls: make(map[string]int)}
	for _, addr := range d.nodes {
		cpu, err := testserver.RedisCPU(context.Background(), addr)
		if err != nil {
			tb.Fatal(err)
		}
		st.cpu += cpu
		info, err := testserver.RedisCommand(context.Background(), addr, "INFO", "commandstats")
		if err != nil {
			tb.Fatal(err)
		}
		for _, m := range cmdstatCalls.FindAllStringSubmatch(info, -1) {
			n, _ := strconv.Atoi(m[2])
			st.calls[m[1]] += n
		}
	}
	return st
}

// procRun is what the rounds of one kind measured, together.
type procRun struct {
	clients  [][]int64 // waits (µs) per client
	elapsed  time.Duration
	redisCPU time.Duration
	calls    map[string]int
}

// round runs clients processes of g goroutines doing mode on key for one
// round and adds what they did to r.
func (d procDeployment) round(b *testing.B, r *procRun, mode, key string, clients, g int) {
	job := childJob{Mode: mode, URL: d.url, Addrs: d.addrs, MasterSet: d.masterSet, Key: key, Goroutines: g,
		Work: time.Millisecond, Wait: 10 * time.Second, Lease: 30 * time.Second, Round: *procRound}
	cs := childproc.StartAll(b, childEnv, slices.Repeat([]childJob{job}, clients), time.Minute)
	before := d.stats(b)
	for _, c := range cs {
		if err := c.Go(); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	results := make([]childResult, len(cs))
	for i, c := range cs {
		results[i] = result(b, c)
	}
	r.elapsed += time.Since(start) - time.Millisecond // the last iteration's work is not Redis's
	after := d.stats(b)
	r.redisCPU += after.cpu - before.cpu
	if r.calls == nil {
		r.calls = make(map[string]int)
	}
	for name, n := range after.calls {
		r.calls[name] += n - before.calls[name]
	}
	if r.clients == nil {
		r.clients = make([][]int64, clients)
	}
	for i, res := range results {
		r.clients[i] = append(r.clients[i], slices.Concat(res.Waits...)...)
	}
}

// summary is the figures of one run.
type summary struct {
	acqPerSec                     float64
	p50, p99, max                 time.Duration
	bestClientP99, worstClientP99 time.Duration
	maxShare, minShare            float64 // ÷ the fair share
	cpuPerAcq                     time.Duration
	scriptsPerAcq, publishPerAcq  float64
	setPerAcq                     float64
}

func (r procRun) summarize() summary {
	all := slices.Concat(r.clients...)
	n := len(all)
	s := summary{acqPerSec: float64(n) / r.elapsed.Seconds()}
	s.p50, s.p99, s.max = pct(all, 50), pct(all, 99), pct(all, 100)
	s.minShare = 1e9
	for i, c := range r.clients {
		p := pct(c, 99)
		if i == 0 || p < s.bestClientP99 {
			s.bestClientP99 = p
		}
		s.worstClientP99 = max(s.worstClientP99, p)
		share := float64(len(c)) * float64(len(r.clients)) / float64(n)
		s.maxShare, s.minShare = max(s.maxShare, share), min(s.minShare, share)
	}
	s.cpuPerAcq = r.redisCPU / time.Duration(max(n, 1))
	s.scriptsPerAcq = float64(r.calls["evalsha"]+r.calls["eval"]) / float64(n)
	s.publishPerAcq = float64(r.calls["publish"]) / float64(n)
	s.setPerAcq = float64(r.calls["set"]) / float64(n)
	return s
}

func pct(us []int64, p int) time.Duration {
	if len(us) == 0 {
		return 0
	}
	s := slices.Clone(us)
	slices.Sort(s)
	return time.Duration(s[min(len(s)-1, len(s)*p/100)]) * time.Microsecond
}

// BenchmarkRedisProcesses has N client processes of P goroutines each (N·P =
// 16) take turns on one key: each iteration locks (WithWait 10s, WithLease
// 30s), releases, then works 1 ms outside the lock. Rounds of distlock
// alternate with rounds of a raw rueidis spin-retry (SET NX PX in a loop,
// compare-and-delete script) in the same processes' shape, on the same
// server. It ignores b.N: run it with -benchtime 1x. Flags: -procbench.topology,
// -procbench.layouts, -procbench.round, -procbench.rounds.
//
// Reported per kind (distlock, spin-): acquisitions/s, p50/p99/max wait over
// all, the best and the worst client's p99, the largest and smallest client
// share ÷ the fair share, the data nodes' CPU per acquisition, and scripts
// (EVALSHA+EVAL), PUBLISH and SET calls per acquisition from INFO commandstats.
func BenchmarkRedisProcesses(b *testing.B) {
	for _, topology := range strings.Split(*procTopologies, ",") {
		b.Run(topology, func(b *testing.B) {
			d := newProcDeployment(b, topology)
			for _, layout := range strings.Split(*procLayouts, ",") {
				var clients, g int
				if _, err := fmt.Sscanf(layout, "%dx%d", &clients, &g); err != nil {
					b.Fatalf("layout %q: %v", layout, err)
				}
				b.Run(layout, func(b *testing.B) {
					var lock, spin procRun
					for i := range *procRounds {
						d.round(b, &lock, "distlock", fmt.Sprintf("procbench/%s/%s/%d", topology, layout, i), clients, g)
						d.round(b, &spin, "spin", fmt.Sprintf("procbench:spin:{%s/%s/%d}", topology, layout, i), clients, g)
					}
					ls, ss := lock.summarize(), spin.summarize()
					for _, k := range []struct {
						prefix string
						s      summary
					}{{"", ls}, {"spin-", ss}} {
						b.ReportMetric(k.s.acqPerSec, k.prefix+"acq/s")
						b.ReportMetric(float64(k.s.p50.Microseconds()), k.prefix+"p50-µs")
						b.ReportMetric(float64(k.s.p99.Microseconds()), k.prefix+"p99-µs")
						b.ReportMetric(float64(k.s.max.Microseconds()), k.prefix+"max-µs")
						b.ReportMetric(float64(k.s.bestClientP99.Microseconds()), k.prefix+"best-client-p99-µs")
						b.ReportMetric(float64(k.s.worstClientP99.Microseconds()), k.prefix+"worst-client-p99-µs")
						b.ReportMetric(k.s.maxShare, k.prefix+"max-share/fair")
						b.ReportMetric(k.s.minShare, k.prefix+"min-share/fair")
						b.ReportMetric(float64(k.s.cpuPerAcq.Nanoseconds())/1000, k.prefix+"redis-cpu-µs/acq")
						b.ReportMetric(k.s.scriptsPerAcq, k.prefix+"scripts/acq")
						b.ReportMetric(k.s.publishPerAcq, k.prefix+"publish/acq")
						b.ReportMetric(k.s.setPerAcq, k.prefix+"set/acq")
					}
					b.ReportMetric(ls.acqPerSec/ss.acqPerSec, "acq/s-vs-spin")
					b.ReportMetric(0, "ns/op")
				})
			}
		})
	}
}
