package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
	"github.com/distlock/distlock/observe"
)

// A holder over Open learns at once, not at its next renewal (a third of
// its 30 s lease), that its key was deleted, changed by another client,
// or given a short expiry that ran out: the key's tracked read. Each loss
// says how.
func TestLossTracked(t *testing.T) {
	s := testserver.Redis(t)
	addr := []string{s.Addr()}
	for _, tc := range []struct {
		name   string
		hold   time.Duration // before the change: 0 changes the key before its first tracked read
		change func(t testing.TB, key string)
		reason string
	}{
		{"deleted", 300 * time.Millisecond, func(t testing.TB, key string) { rawCommand(t, addr, "DEL", lockName(key)) }, observe.LossDeleted},
		{"deleted at once", 0, func(t testing.TB, key string) { rawCommand(t, addr, "DEL", lockName(key)) }, observe.LossDeleted},
		{"taken", 300 * time.Millisecond, func(t testing.TB, key string) { rawCommand(t, addr, "SET", lockName(key), "another-token") }, observe.LossTaken},
		{"expired", 300 * time.Millisecond, func(t testing.TB, key string) { rawCommand(t, addr, "PEXPIRE", lockName(key), "50") }, observe.LossDeleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, openURL(t, "redis://"+s.Addr()))
			lossTold(t, c, "tracked/"+strings.ReplaceAll(tc.name, " ", "-"), tc.hold, tc.change, tc.reason)
		})
	}
}

// lossTold has c take key, waits hold, has change change it behind the
// holder's back, and fails unless the holder is told within 5 s, with the
// loss reason reason.
func lossTold(t *testing.T, c *distlock.Client, key string, hold time.Duration, change func(testing.TB, string), reason string) {
	t.Helper()
	ctx := testContext(t)
	l, err := c.Lock(ctx, key, distlock.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(hold)
	start := time.Now()
	change(t, key)
	select {
	case <-l.Done():
		t.Logf("told %v after the change", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told within 5 s of the change")
	}
	if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) || !strings.Contains(err.Error(), "("+reason+")") {
		t.Fatalf("Err() = %v, want ErrLockLost (%s)", err, reason)
	}
}

// The holder's own writes of its key (renewals, a waiter queueing, which
// marks the key) are not losses, and a key released and taken again is
// followed anew.
func TestLossTrackedOwnWrites(t *testing.T) {
	s := testserver.Redis(t)
	ctx := testContext(t)
	holder := newClient(t, openURL(t, "redis://"+s.Addr()))
	waiter := newClient(t, openURL(t, "redis://"+s.Addr()))
	key := "tracked/own"
	l, err := holder.Lock(ctx, key, distlock.WithLease(600*time.Millisecond), distlock.WithWatchdog(true))
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		w, err := waiter.Lock(ctx, key, distlock.WithWait(10*time.Second))
		if err == nil {
			err = w.Release(ctx)
		}
		waited <- err
	}()
	select {
	case <-l.Done():
		t.Fatalf("lost while renewed, with a waiter queued: %v", l.Err())
	case <-time.After(2 * time.Second): // ten renewals
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	again, err := holder.Lock(ctx, key, distlock.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	rawCommand(t, []string{s.Addr()}, "DEL", lockName(key))
	select {
	case <-again.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a key taken again was not followed: its deletion was not told within 5 s")
	}
}

// Without tracking (track_loss=false), a deletion is
// learnt at the next renewal: not within the 2 s this waits, of a 30 s lease.
func TestLossTrackingOff(t *testing.T) {
	s := testserver.Redis(t)
	ctx := testContext(t)
	c := newClient(t, openURL(t, "redis://"+s.Addr()+"?track_loss=false"))
	l, err := c.Lock(ctx, "untracked", distlock.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	rawCommand(t, []string{s.Addr()}, "DEL", lockName("untracked"))
	select {
	case <-l.Done():
		t.Fatalf("told with track_loss=false: %v", l.Err())
	case <-time.After(2 * time.Second):
	}
}

// A token acquired for a holder elsewhere (AcquireToken, as the lock
// service does) has no Lost to end: its key is not read, while a Lock's is.
func TestLossTrackingSkipsTokens(t *testing.T) {
	s := testserver.Redis(t)
	ctx := testContext(t)
	c := newClient(t, openURL(t, "redis://"+s.Addr()))
	// The first grant subscribes the backend to lost notices, and the
	// subscription then reads the missed requests of its holds: let that
	// pass before counting.
	if _, err := c.AcquireToken(ctx, "tokens/first", "fedcba9876543210fedcba9876543210", distlock.WithLease(time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	reads := func(hold func(key string)) int {
		t.Helper()
		key := fmt.Sprintf("tokens/%d", time.Now().UnixNano())
		hold(key)
		before := getCalls(t, s.Addr())
		time.Sleep(300 * time.Millisecond) // past the tracker's first read
		return getCalls(t, s.Addr()) - before
	}
	if n := reads(func(key string) {
		if _, err := c.AcquireToken(ctx, key, "0123456789abcdef0123456789abcdef", distlock.WithLease(30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("a token's key was read %d times in 300 ms, want 0", n)
	}
	if n := reads(func(key string) {
		if _, err := c.Lock(ctx, key, distlock.WithLease(30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("a lock's key was read %d times in 300 ms, want 1", n)
	}
}

// BenchmarkDeletionNotice is locktest.LossNoticeOf with a DEL of the held
// key behind its holder's back, held past the tracker's first read (p99
// from the DEL's send to Done()).
func BenchmarkDeletionNotice(b *testing.B) {
	s := testserver.Redis(b)
	holder := distlock.New(openURL(b, "redis://"+s.Addr()))
	defer holder.Close()
	locktest.LossNoticeOf(b, holder, 150*time.Millisecond, func(ctx context.Context, key string) error {
		_, err := testserver.RedisCommand(ctx, s.Addr(), "DEL", lockName(key))
		return err
	})
}

// BenchmarkTrackedHolds measures what tracking costs a held lock: 1 000
// locks held 4 s with a 3 s lease (renewed every second), with and without
// tracking, each b.N times. It reports Redis's CPU and the holder process's
// CPU per held lock and second, and the tracked reads (GET) Redis served per
// held lock and second.
func BenchmarkTrackedHolds(b *testing.B) {
	const holds, held = 1000, 4 * time.Second
	s := testserver.Redis(b)
	for _, tc := range []struct{ name, url string }{
		{"tracked", "redis://" + s.Addr()},
		{"untracked", "redis://" + s.Addr() + "?track_loss=false"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			c := distlock.New(openURL(b, tc.url))
			defer c.Close()
			var redisCPU, procCPU time.Duration
			var gets int
			for i := range b.N {
				cpu0, _ := testserver.RedisCPU(ctx, s.Addr())
				gets0 := getCalls(b, s.Addr())
				proc0 := processCPU()
				locks := make([]*distlock.Lock, holds)
				for j := range locks {
					l, err := c.Lock(ctx, fmt.Sprintf("held/%s/%d/%d", tc.name, i, j), distlock.WithLease(3*time.Second), distlock.WithWatchdog(true))
					if err != nil {
						b.Fatal(err)
					}
					locks[j] = l
				}
				time.Sleep(held)
				for _, l := range locks {
					if err := l.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
				cpu1, _ := testserver.RedisCPU(ctx, s.Addr())
				redisCPU += cpu1 - cpu0
				procCPU += processCPU() - proc0
				gets += getCalls(b, s.Addr()) - gets0
			}
			per := float64(b.N*holds) * held.Seconds()
			b.ReportMetric(float64(redisCPU.Microseconds())/per, "redis-cpu-us/hold-s")
			b.ReportMetric(float64(procCPU.Microseconds())/per, "proc-cpu-us/hold-s")
			b.ReportMetric(float64(gets)/per, "gets/hold-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// getCalls returns how many GETs Redis has run (INFO
// commandstats).
func getCalls(t testing.TB, addr string) int {
	info, err := testserver.RedisCommand(context.Background(), addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_get:calls="); ok {
			n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			return n
		}
	}
	return 0
}

// processCPU returns the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
