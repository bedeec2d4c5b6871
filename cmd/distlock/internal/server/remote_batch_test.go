package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// batchLoad makes 32 callers of c take and release keys, each its own key
// and one they share, for rounds rounds, and fails the test on an error or
// on two holders of the shared key at once. It returns how many grants of
// the shared key it saw.
func batchLoad(t *testing.T, c *distlock.Client, rounds int) int64 {
	t.Helper()
	shared := keyFor(t, "shared")
	var inside, granted atomic.Int64
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			own := keyFor(t, fmt.Sprintf("own-%d", i))
			for range rounds {
				l, err := c.Lock(remoteCtx(t), own, distlock.WithWait(10*time.Second), distlock.WithLease(time.Minute))
				if err != nil {
					t.Errorf("lock of a key of its own: %v", err)
					return
				}
				if err := l.Release(remoteCtx(t)); err != nil {
					t.Errorf("release of a key of its own: %v", err)
				}
				s, err := c.Lock(remoteCtx(t), shared, distlock.WithWait(10*time.Second), distlock.WithLease(time.Minute))
				if err != nil {
					t.Errorf("lock of the shared key: %v", err)
					return
				}
				if inside.Add(1) != 1 {
					t.Errorf("two holders of the shared key at once")
				}
				granted.Add(1)
				inside.Add(-1)
				if err := s.Release(remoteCtx(t)); err != nil {
					t.Errorf("release of the shared key: %v", err)
				}
			}
		})
	}
	wg.Wait()
	return granted.Load()
}

// remotelock sends the short calls of concurrent callers in batches, and
// every call gets its own answer: each caller's keys are granted and
// released, and the shared key has one holder at a time. The service's
// log shows Batch requests, and each of their calls logged as its own.
func TestRemoteBatchesConcurrentCalls(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		b, err := remotelock.New(nil, e.url, remotelock.WithToken(alphaClient))
		if err != nil {
			t.Fatal(err)
		}
		c := distlock.New(b)
		defer c.Close()
		const rounds = 10
		if n := batchLoad(t, c, rounds); n != 32*rounds {
			t.Errorf("%d grants of the shared key, want %d", n, 32*rounds)
		}
		methods := make(map[string]int)
		for _, r := range e.logs.records(t, "call") {
			methods[fmt.Sprint(r["method"])]++
			if r["method"] == "Batch" && r["code"] != "ok" {
				t.Errorf("a batch failed: %v", r)
			}
		}
		if methods["Batch"] == 0 {
			t.Errorf("no Batch among the calls %v", methods)
		}
		if methods["Release"] != 2*32*rounds {
			t.Errorf("%d releases logged, want %d, each call of a batch on its own: %v", methods["Release"], 2*32*rounds, methods)
		}
	})
}

// A service without Batch (an older one) answers it Unimplemented:
// remotelock then sends every call alone, and concurrent callers are
// served as before.
func TestRemoteBatchOnServiceWithout(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		var refused atomic.Int64
		older := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == distlockv1connect.LockServiceBatchProcedure {
				refused.Add(1)
				http.NotFound(w, r) // Connect reads 404 as Unimplemented
				return
			}
			e.srv.Handler().ServeHTTP(w, r)
		}))
		defer older.Close()
		b, err := remotelock.New(&http.Client{Transport: &http.Transport{}}, older.URL, remotelock.WithToken(alphaClient))
		if err != nil {
			t.Fatal(err)
		}
		c := distlock.New(b)
		defer c.Close()
		if n := batchLoad(t, c, 5); n != 32*5 {
			t.Errorf("%d grants of the shared key, want %d", n, 32*5)
		}
		// Once, or by each of the batcher's 4 requests in flight before
		// the first answer came.
		if n := refused.Load(); n < 1 || n > 4 {
			t.Errorf("Batch asked %d times of a service without it, want 1 to 4", n)
		}
	})
}

// A call that waits for its batch and whose context ends returns at once,
// and is not sent: with the batcher's four requests held up in the
// service, a fifth release waits, gives up at its deadline, and its key
// stays held.
func TestRemoteBatchedCallCancelled(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		hold := make(chan struct{})
		var releases, batches atomic.Int64
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case distlockv1connect.LockServiceReleaseProcedure:
				releases.Add(1)
				<-hold
			case distlockv1connect.LockServiceBatchProcedure:
				batches.Add(1)
			}
			e.srv.Handler().ServeHTTP(w, r)
		}))
		defer slow.Close()
		b, err := remotelock.New(&http.Client{Transport: &http.Transport{}}, slow.URL, remotelock.WithToken(alphaClient))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		var keys, tokens []string
		for i := range 5 {
			key, token := keyFor(t, fmt.Sprint(i)), fmt.Sprintf("token-of-key-%04d", i)
			if _, err := b.Acquire(remoteCtx(t), driver.AcquireRequest{Key: key, Token: token, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			keys, tokens = append(keys, key), append(tokens, token)
		}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() { _ = b.Release(context.Background(), keys[i], tokens[i]) })
		}
		eventually(t, 5*time.Second, "four releases held up", func() bool { return releases.Load() == 4 })
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = b.Release(ctx, keys[4], tokens[4])
		if err == nil || time.Since(start) > 2*time.Second {
			t.Errorf("a queued release with a deadline of 200ms: %v after %v, want its deadline's error", err, time.Since(start))
		}
		close(hold)
		wg.Wait()
		if n := batches.Load() + releases.Load() - 4; n != 0 {
			t.Errorf("%d requests sent after the queued release gave up, want none", n)
		}
		if l := inspect(t, e.api(alphaClient), keys[4]); !l.GetHeld() {
			t.Errorf("the key of the release that gave up: %v, want still held", l)
		}
	})
}

// A hold's renewal and release never wait behind acquisition attempts:
// with the backend's four requests of attempts held up in the service and
// more attempts queued, a renewal and a release of a held key are answered.
func TestRemoteBatchedHoldsPassAttempts(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		hold := make(chan struct{})
		var acquires, heldUp atomic.Int64
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case distlockv1connect.LockServiceAcquireProcedure:
				if acquires.Add(1) == 1 {
					break // the held key's
				}
				heldUp.Add(1)
				<-hold
			case distlockv1connect.LockServiceBatchProcedure:
				// Attempts that queued while the held key's request
				// still had its place go together.
				heldUp.Add(1)
				<-hold
			}
			e.srv.Handler().ServeHTTP(w, r)
		}))
		defer slow.Close()
		defer close(hold)
		b, err := remotelock.New(&http.Client{Transport: &http.Transport{}}, slow.URL, remotelock.WithToken(alphaClient))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		key, token := keyFor(t, "held"), "token-of-the-held-key"
		if _, err := b.Acquire(remoteCtx(t), driver.AcquireRequest{Key: key, Token: token, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		attempts, cancelAttempts := context.WithCancel(context.Background())
		defer cancelAttempts()
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancelAttempts()
		for i := range 6 {
			wg.Go(func() {
				_, _ = b.Acquire(attempts, driver.AcquireRequest{Key: keyFor(t, fmt.Sprint(i)), Token: fmt.Sprintf("token-of-attempt-%04d", i), TTL: time.Minute})
			})
		}
		eventually(t, 20*time.Second, "four requests of attempts held up", func() bool { return heldUp.Load() == 4 })
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := b.Renew(ctx, key, token, time.Minute); err != nil {
			t.Errorf("a renewal behind held-up attempts: %v", err)
		}
		if err := b.Release(ctx, key, token); err != nil {
			t.Errorf("a release behind held-up attempts: %v", err)
		}
	})
}
