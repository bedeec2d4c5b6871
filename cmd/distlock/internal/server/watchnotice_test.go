package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	"github.com/distlock/distlock/driver"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
	"github.com/distlock/distlock/internal/testserver"
)

// etcdStore is a store over a real etcd server, and its endpoint.
func etcdStore(t testing.TB) (store, string) {
	etcd := testserver.Etcd(t)
	ep := testserver.EtcdEndpoint(etcd)
	return store{"etcd", func(t *testing.T, opts ...distlock.ClientOption) *distlock.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := etcdlock.Dial(ctx, clientv3.Config{Endpoints: []string{ep}})
		if err != nil {
			t.Fatal(err)
		}
		return distlock.New(b, opts...)
	}}, ep
}

// etcdReads returns how many range reads the etcd server at endpoint has
// served, from its metrics.
func etcdReads(t testing.TB, endpoint string) int {
	return int(etcdMetric(t, endpoint, func(l string) bool {
		return strings.HasPrefix(l, "grpc_server_handled_total{") && strings.Contains(l, `grpc_method="Range"`)
	}))
}

// etcdMetric returns the sum of the samples of the etcd server at endpoint
// whose lines match (0 if none does).
func etcdMetric(t testing.TB, endpoint string, match func(line string) bool) float64 {
	t.Helper()
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") || !match(l) {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndex(l, " ")+1:], 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestWatchIdleReadsNothing: over etcd and Redis, which tell of changes,
// an open Watch of a namespace where nothing changes makes no read of the
// store, where a poll would List it every interval; a change through
// another server still arrives.
func TestWatchIdleReadsNothing(t *testing.T) {
	rds := testserver.Redis(t)
	etcd, ep := etcdStore(t)
	for _, tc := range []struct {
		st    store
		reads func(t testing.TB) int
	}{
		{etcd, func(t testing.TB) int { return etcdReads(t, ep) }},
		{redisStore(t, rds.Addr()), func(t testing.TB) int { return redisReads(t, rds.Addr()) }},
	} {
		t.Run(tc.st.name, func(t *testing.T) {
			limits := server.Limits{WatchInterval: 50 * time.Millisecond}
			e, other := newEnv(t, tc.st, limits), newEnv(t, tc.st, limits)
			prefix := keyFor(t, "")
			// A key held, so that a poll would have something to read.
			acquire(t, e.api(alphaClient), &distlockv1.AcquireRequest{Key: prefix + "held", Lease: durationpb.New(time.Minute)})
			events, _ := watch(t, e.api(alphaViewer), prefix)
			time.Sleep(200 * time.Millisecond) // not synchronisation: let the watch settle
			before := tc.reads(t)
			time.Sleep(time.Second) // the window measured: 20 poll intervals
			if reads := tc.reads(t) - before; reads != 0 {
				t.Errorf("an idle Watch made %d reads of the store in 1s", reads)
			}
			d := acquire(t, other.api(alphaClient), &distlockv1.AcquireRequest{Key: prefix + "d", Lease: durationpb.New(time.Minute)})
			if ev := nextEvent(t, events, prefix+"d"); ev.GetType() != distlockv1.Event_TYPE_ACQUIRED || ev.GetLock().GetFence() != d.GetFence() {
				t.Errorf("a grant through another server: event %v, want ACQUIRED with fence %d", ev, d.GetFence())
			}
		})
	}
}

// redisReads returns how many commands that read locks (scripts, SCAN,
// GET) the redis-server at addr has run, from INFO commandstats.
func redisReads(t testing.TB, addr string) int {
	t.Helper()
	info, err := testserver.RedisCommand(context.Background(), addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !slices.Contains([]string{"cmdstat_evalsha", "cmdstat_eval", "cmdstat_scan", "cmdstat_get", "cmdstat_mget"}, name) {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		c, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("INFO commandstats line %q: %v", line, err)
		}
		n += c
	}
	return n
}

// TestWatchReadsOfAHotKeyAreBounded: over etcd, a Watch reads each key a
// notice names, and a key that changes hundreds of times a second must not
// make it read the store as often: readings are at least minReadingGap
// apart, so one second of changes costs at most about 20 readings.
func TestWatchReadsOfAHotKeyAreBounded(t *testing.T) {
	st, ep := etcdStore(t)
	e, other := newEnv(t, st, server.Limits{}), newEnv(t, st, server.Limits{})
	prefix := keyFor(t, "")
	events, _ := watch(t, e.api(alphaViewer), prefix)
	api := other.api(alphaClient)
	key := prefix + "hot"
	cycle := func() {
		h := acquire(t, api, &distlockv1.AcquireRequest{Key: key, Lease: durationpb.New(time.Minute)})
		if _, err := api.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: key, Token: h.GetToken()})); err != nil {
			t.Fatal(err)
		}
	}
	// The watch is working: a grant through the other server arrives.
	h := acquire(t, api, &distlockv1.AcquireRequest{Key: key, Lease: durationpb.New(time.Minute)})
	if ev := nextEvent(t, events, key); ev.GetType() != distlockv1.Event_TYPE_ACQUIRED || ev.GetLock().GetFence() != h.GetFence() {
		t.Fatalf("a grant through another server: event %v, want ACQUIRED with fence %d", ev, h.GetFence())
	}
	if _, err := api.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: key, Token: h.GetToken()})); err != nil {
		t.Fatal(err)
	}
	before, start, cycles := etcdReads(t, ep), time.Now(), 0
	for ; cycles < 5000 && time.Since(start) < time.Second; cycles++ {
		cycle()
	}
	took := time.Since(start)
	reads := etcdReads(t, ep) - before
	t.Logf("%d Lock+Release cycles in %v; the Watch made %d reads", cycles, took, reads)
	if most := int(took/(50*time.Millisecond)) + 4; reads > most {
		t.Errorf("%d cycles of one key in %v made %d reads of etcd, want at most %d", cycles, took, reads, most)
	}
}

// BenchmarkWatchLatency measures how long after a grant through another
// service process a Watch of the first reports it, with default limits:
// over etcd, whose watch tells the watched service of the change, and over
// Redis, whose broadcast tracking does (CLIENT TRACKING BCAST PREFIX). The
// grants are 150 ms apart: changes closer than 50 ms to the last reading
// wait for it (TestWatchReadsOfAHotKeyAreBounded). It reports the median
// and the 99th percentile:
//
//	cd cmd/distlock && go test -run '^$' -bench BenchmarkWatchLatency -benchtime 200x ./internal/server
func BenchmarkWatchLatency(b *testing.B) {
	for _, st := range remoteStores(b) {
		b.Run(st.name, func(b *testing.B) {
			watched, granting := startRemoteService(b, st), startRemoteService(b, st)
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
			b.Cleanup(hc.CloseIdleConnections)
			api := distlockv1connect.NewLockServiceClient(hc, watched.url, connect.WithInterceptors(bearer(remoteClient)))
			wctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			prefix := fmt.Sprintf("watch-latency/%d/", time.Now().UnixNano())
			stream, err := api.Watch(wctx, connect.NewRequest(&distlockv1.WatchRequest{Prefix: prefix}))
			if err != nil {
				b.Fatal(err)
			}
			defer stream.Close()
			events := make(chan time.Time, 16)
			go func() {
				for stream.Receive() {
					if stream.Msg().GetEvent().GetType() == distlockv1.Event_TYPE_ACQUIRED {
						events <- time.Now()
					}
				}
				close(events)
			}()
			c := distlock.New(remoteBackendAt(b, granting.addr, remoteClient))
			defer c.Close()
			ctx, stop := context.WithTimeout(context.Background(), 5*time.Minute)
			defer stop()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				// Past the release's reading and the least gap between two
				// readings (50 ms): the grant is the first change after a
				// quiet gap, which is read at once.
				time.Sleep(150 * time.Millisecond)
				l, err := c.Lock(ctx, prefix+strconv.Itoa(i))
				if err != nil {
					b.Fatal(err)
				}
				granted := time.Now()
				select {
				case at, ok := <-events:
					if !ok {
						b.Fatalf("the watch ended: %v", stream.Err())
					}
					lat = append(lat, at.Sub(granted))
				case <-time.After(10 * time.Second):
					b.Fatal("no event within 10s of a grant")
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1e3, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1e3, "p99-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// readingDuringForce is an etcd backend on which a reading of key begins
// before a forced release of it and ends after the store freed the key,
// but before the forced release's event is out: a store notice read then
// finds the key gone and cannot tell why.
type readingDuringForce struct {
	*etcdlock.Backend
	key           string
	begun, forced chan struct{} // the reading has begun; the key is freed
	read          chan struct{} // the reading has its answer
	armed         atomic.Bool
}

func (b *readingDuringForce) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if !strings.HasSuffix(key, b.key) || !b.armed.CompareAndSwap(true, false) {
		return b.Backend.Inspect(ctx, key)
	}
	close(b.begun)
	<-b.forced
	defer close(b.read)
	return b.Backend.Inspect(ctx, key)
}

func (b *readingDuringForce) ForceRelease(ctx context.Context, key string, opts driver.ForceOptions) (driver.Info, error) {
	info, err := b.Backend.ForceRelease(ctx, key, opts)
	if strings.HasSuffix(key, b.key) {
		close(b.forced)
		<-b.read
		time.Sleep(100 * time.Millisecond) // the reading reaches the streams
	}
	return info, err
}

// A forced release is told as one to the watchers, never as a release,
// even when a reading of its key was under way as the store freed it.
func TestWatchForcedReleaseDuringAReading(t *testing.T) {
	st, _ := etcdStore(t)
	prefix := keyFor(t, "")
	b := &readingDuringForce{key: prefix + "k", begun: make(chan struct{}), forced: make(chan struct{}), read: make(chan struct{})}
	b.Backend = st.open(t).Backend().(*etcdlock.Backend)
	b.armed.Store(true)
	e := newEnvClient(t, distlock.New(b), server.Limits{WatchInterval: time.Hour})
	events, _ := watch(t, e.api(alphaViewer), prefix)

	a := acquire(t, e.api(alphaClient), &distlockv1.AcquireRequest{Key: prefix + "k", Lease: durationpb.New(time.Minute)})
	if ev := nextEvent(t, events, prefix+"k"); ev.GetType() != distlockv1.Event_TYPE_ACQUIRED {
		t.Fatalf("%v, want the grant", ev)
	}
	select {
	case <-b.begun: // the reading of the grant's notice
	case <-time.After(10 * time.Second):
		t.Fatal("no reading of the grant's notice within 10s")
	}
	if _, err := e.api(opsAdmin).ForceRelease(ctx(t), connect.NewRequest(&distlockv1.ForceReleaseRequest{
		Key: prefix + "k", Tenant: "alpha", Reason: "stuck job"})); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, events, prefix+"k"); ev.GetType() != distlockv1.Event_TYPE_FORCE_RELEASED || ev.GetLock().GetFence() != a.GetFence() {
		t.Fatalf("%v of fence %d, want the forced release of fence %d", ev.GetType(), ev.GetLock().GetFence(), a.GetFence())
	}
}
