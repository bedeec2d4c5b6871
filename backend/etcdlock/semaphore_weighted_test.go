package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// TestPermitIntentLease: a request for both permits of two, refused while
// one is held, keeps one intent key and no entry of its attempts; while it
// retries, a single permit is refused though one is free; once it stops,
// the intent keeps permits out for about driver.WriteIntentTTL; a
// withdrawn intent keeps nobody out. A hold of two reports its count and
// keeps it across a move to another lease.
func TestPermitIntentLease(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli, prefix := admin(t, eps), uniquePrefix(t)
	b := dial(t, eps, prefix)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seq := 0
	try := func(n int, intent string) (string, error) {
		seq++
		token := fmt.Sprintf("%032x", seq)
		_, err := b.AcquirePermits(ctx, driver.AcquireRequest{Key: "s", Token: token, TTL: 10 * time.Second, Intent: intent, Permits: n}, 2)
		return token, err
	}
	keys := func(part string) []string {
		var out []string
		for _, k := range semKeys(t, cli, prefix, "s") {
			if strings.Contains(k, part) {
				out = append(out, k)
			}
		}
		return out
	}
	held, err := try(1, "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for time.Since(start) < driver.WriteIntentTTL+time.Second { // the request retries, paced well within the TTL
		if _, err := try(2, "big"); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("both permits while one is held: %v, want ErrNotAcquired", err)
		}
		if _, err := try(1, ""); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("a single permit %v after a request of two began waiting: %v, want ErrNotAcquired", time.Since(start).Round(time.Millisecond), err)
		}
		time.Sleep(300 * time.Millisecond) // pacing, not synchronisation
	}
	if got := keys("%00i"); len(got) != 1 {
		t.Fatalf("intent keys of one waiting request: %q, want one", got)
	}
	if got := keys("%00p"); len(got) != 1 {
		t.Fatalf("permit entries: %q, want the holder's alone", got)
	}
	stopped := time.Now()
	var second string
	for second, err = try(1, ""); errors.Is(err, driver.ErrNotAcquired) && time.Since(stopped) < 10*time.Second; second, err = try(1, "") {
		time.Sleep(50 * time.Millisecond) // polling the store, bounded
	}
	if err != nil {
		t.Fatalf("a single permit after the request stopped retrying: %v", err)
	}
	if took := time.Since(stopped); took < driver.WriteIntentTTL/2 {
		t.Errorf("a permit was granted %v after the request's last attempt: the intent should keep permits out for about %v", took, driver.WriteIntentTTL)
	}
	if err := b.ReleasePermit(ctx, "s", second); err != nil {
		t.Fatal(err)
	}

	if _, err := try(2, "gone"); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("both permits while one is held: %v, want ErrNotAcquired", err)
	}
	if err := b.WithdrawPermitIntent(ctx, "s", "gone"); err != nil {
		t.Fatal(err)
	}
	third, err := try(1, "")
	if err != nil {
		t.Fatalf("a single permit after the request withdrew its intent: %v", err)
	}
	for _, token := range []string{held, third} {
		if err := b.ReleasePermit(ctx, "s", token); err != nil {
			t.Fatal(err)
		}
	}

	c := distlock.New(dial(t, eps, prefix))
	defer c.Close()
	sem, err := c.Semaphore("s", 2)
	if err != nil {
		t.Fatal(err)
	}
	l, err := sem.AcquireN(ctx, 2, distlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, lease := range []time.Duration{0, 20 * time.Second} {
		if lease > 0 {
			if err := l.Extend(ctx, lease); err != nil { // a move to a lease of another TTL
				t.Fatal(err)
			}
		}
		if info, err := sem.Inspect(ctx); err != nil || len(info.Held) != 1 || info.Held[0].Permits != 2 || info.Held[0].Fence != l.Fence() {
			t.Errorf("Inspect of a hold of 2 (extended to %v): %+v, %v", lease, info, err)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := keys(""); len(got) != 1 {
		t.Errorf("keys once the hold of 2 was released: %q, want the limit alone", got)
	}
}
