package election_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/backend/memlock"
	_ "github.com/distlock/distlock/backend/pglock"
	_ "github.com/distlock/distlock/backend/redislock"
	_ "github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// store opens clients on one running store server.
type store struct {
	name string
	// url is the store's URL for a given address ("" for the server's own).
	url  func(addr string) string
	addr string // the server's address; "" for memlock
}

// stores starts every store the election is tested on.
func stores(t *testing.T) []store {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	rds, etcd, zk, pg := testserver.Redis(t), testserver.Etcd(t), testserver.ZooKeeper(t), testserver.Postgres(t)
	mem := "mem://" + t.Name()
	return []store{
		{"mem", func(string) string { return mem }, ""},
		{"redis", func(a string) string { return "redis://" + a }, rds.Addr()},
		{"etcd", func(a string) string { return "etcd://" + a + "/election-test" }, etcd.Addr()},
		{"zk", func(a string) string { return "zk://" + a + "/election-test?session_timeout=4s" }, zk.Addr()},
		{"postgres", func(a string) string { return "postgres://postgres@" + a + "/postgres?sslmode=disable" }, pg.Addr()},
	}
}

// client opens a client of st through addr (the server's own if "").
func (st store) client(t *testing.T, addr string) *distlock.Client {
	t.Helper()
	if addr == "" {
		addr = st.addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := distlock.Open(ctx, st.url(addr))
	if err != nil {
		t.Fatalf("%s: %v", st.name, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// forEachStore runs f on every store, sequentially.
func forEachStore(t *testing.T, f func(t *testing.T, st store)) {
	for _, st := range stores(t) {
		t.Run(st.name, func(t *testing.T) { f(t, st) })
	}
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newElection(t *testing.T, c *distlock.Client, name string, opts ...election.Option) *election.Election {
	t.Helper()
	e, err := election.New(c, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Three candidates on three clients campaign for six terms between them:
// one leader at a time, each term's fence above the last, and Leader names
// the one that leads.
func TestOneLeaderAtATime(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		ctx := testContext(t, time.Minute)
		name := fmt.Sprintf("one-leader-%d", time.Now().UnixNano())
		const terms = 6
		var (
			leading  atomic.Int32
			mu       sync.Mutex
			fences   []uint64
			wg       sync.WaitGroup
			problems = make(chan string, 3*terms)
		)
		for i := range 3 {
			e := newElection(t, st.client(t, ""), name)
			value := fmt.Sprintf("candidate-%d", i)
			wg.Go(func() {
				for {
					mu.Lock()
					done := len(fences) >= terms
					mu.Unlock()
					if done || ctx.Err() != nil {
						return
					}
					term, err := e.Campaign(ctx, value, distlock.WithLease(2*time.Second), distlock.WithWatchdog(true))
					if err != nil {
						problems <- "campaign: " + err.Error()
						return
					}
					if n := leading.Add(1); n != 1 {
						problems <- fmt.Sprintf("%d leaders at once", n)
					}
					if l, err := e.Leader(ctx); err != nil || l.Value != value || l.Fence != term.Fence() {
						problems <- fmt.Sprintf("leader %+v, %v; want %s with fence %d", l, err, value, term.Fence())
					}
					mu.Lock()
					fences = append(fences, term.Fence())
					mu.Unlock()
					time.Sleep(20 * time.Millisecond) // the term's work
					leading.Add(-1)
					if err := term.Resign(ctx); err != nil {
						problems <- "resign: " + err.Error()
					}
				}
			})
		}
		wg.Wait()
		close(problems)
		for p := range problems {
			t.Error(p)
		}
		for i := 1; i < len(fences); i++ {
			if fences[i] <= fences[i-1] {
				t.Errorf("term fences %v: not increasing", fences)
				break
			}
		}
		if len(fences) < terms {
			t.Errorf("%d terms, want %d", len(fences), terms)
		}
	})
}

// Resign hands over at once to a waiting candidate; Observe sees the terms
// in order, and nobody leading between them.
func TestResignAndObserve(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		ctx := testContext(t, time.Minute)
		name := fmt.Sprintf("resign-%d", time.Now().UnixNano())
		a := newElection(t, st.client(t, ""), name)
		b := newElection(t, st.client(t, ""), name)
		watcher := newElection(t, st.client(t, ""), name, election.WithPollInterval(20*time.Millisecond))
		if _, err := watcher.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
			t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
		}
		octx, stop := context.WithCancel(ctx)
		defer stop()
		seen := watcher.Observe(octx)
		if l := <-seen; l != (election.Leader{}) {
			t.Fatalf("first observation %+v, want nobody", l)
		}

		ta, err := a.Campaign(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if l := <-seen; l.Value != "a" || l.Fence != ta.Fence() {
			t.Fatalf("observed %+v, want a with fence %d", l, ta.Fence())
		}
		got := make(chan *election.Term, 1)
		go func() {
			tb, err := b.Campaign(ctx, "b")
			if err != nil {
				t.Error(err)
			}
			got <- tb
		}()
		time.Sleep(100 * time.Millisecond) // not synchronisation: b campaigns
		resigned := time.Now()
		if err := ta.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		<-ta.Done()
		tb := <-got
		if tb == nil {
			stop()
			for range seen {
			}
			return
		}
		took := time.Since(resigned)
		t.Logf("handed over %v after Resign", took)
		if took > time.Second {
			t.Errorf("b led %v after a resigned, want at once", took)
		}
		if tb.Fence() <= ta.Fence() {
			t.Errorf("b's fence %d not above a's %d", tb.Fence(), ta.Fence())
		}
		var order []election.Leader
		for l := range seen {
			order = append(order, l)
			if l.Value == "b" {
				break
			}
		}
		for _, l := range order {
			if l.Value == "a" || (l.Value == "" && l.Fence != 0) || (l.Value == "b" && l.Fence != tb.Fence()) {
				t.Errorf("after a's term Observe sent %+v (all: %+v)", l, order)
			}
		}
		if err := tb.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		stop()
		for range seen { // Observe closes its channel when ctx ends
		}
	})
}

// A leader whose link to the store goes dead is told its term ended
// before another candidate leads, and another does lead, within the
// lease and the store's expiry.
func TestLeaderCutOff(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		if st.addr == "" {
			t.Skip("memlock has no link to cut")
		}
		if st.name == "zk" || st.name == "postgres" {
			// Their lock is the session's: a dead link leaves the session
			// alive on the server until it times out, so nobody else leads
			// within the lease. Their packages kill the session and check
			// that the holder is told.
			t.Skip("the lock lives as long as the server-side session, not the lease")
		}
		ctx := testContext(t, time.Minute)
		name := fmt.Sprintf("cut-%d", time.Now().UnixNano())
		proxy := faultproxy.Start(t, st.addr)
		leader := newElection(t, st.client(t, proxy.Addr()), name)
		other := newElection(t, st.client(t, ""), name)
		term, err := leader.Campaign(ctx, "leader", distlock.WithLease(2*time.Second), distlock.WithWatchdog(true))
		if err != nil {
			t.Fatal(err)
		}
		proxy.Blackhole()
		cut := time.Now()
		next, err := other.Campaign(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		led := time.Now()
		// Err reads the clock: the old leader, checking before it acts,
		// is told. Done follows on the client's timer, which a loaded
		// machine may run a little late.
		if err := term.Err(); !errors.Is(err, distlock.ErrLockLost) {
			t.Fatalf("another leads %v after the cut and the old term's Err is %v, want ErrLockLost", led.Sub(cut), err)
		}
		select {
		case <-term.Done():
		case <-time.After(time.Second):
			t.Fatalf("the old term's Done still open a second after another led")
		}
		if next.Fence() <= term.Fence() {
			t.Errorf("new term's fence %d not above the old %d", next.Fence(), term.Fence())
		}
		t.Logf("another led %v after the link was cut (lease 2s)", led.Sub(cut).Round(time.Millisecond))
		proxy.Restore()
		if err := next.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Bad input is refused before any store call.
func TestInvalid(t *testing.T) {
	c := distlock.New(memlock.New())
	defer c.Close()
	if _, err := election.New(nil, "x"); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := election.New(c, ""); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("empty name: %v", err)
	}
	if _, err := election.New(c, "x", election.WithPollInterval(0)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("poll interval 0: %v", err)
	}
}
