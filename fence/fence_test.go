package fence_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/fence"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGuard(t *testing.T) {
	ctx := context.Background()
	var g fence.Guard
	steps := []struct {
		key   string
		fence uint64
		stale bool
	}{
		{"a", 5, false},
		{"a", 5, false}, // the same grant writes again
		{"a", 4, true},
		{"b", 1, false}, // keys are independent
		{"a", 9, false},
		{"a", 5, true},
	}
	for i, s := range steps {
		err := g.Check(ctx, fence.Token{Key: s.key, Fence: s.fence})
		if s.stale != errors.Is(err, fence.ErrStale) || (!s.stale && err != nil) {
			t.Fatalf("step %d (%s@%d): %v, want stale=%v", i, s.key, s.fence, err, s.stale)
		}
	}
	if g.Last("a") != 9 || g.Last("b") != 1 || g.Last("c") != 0 {
		t.Fatalf("Last = %d, %d, %d; want 9, 1, 0", g.Last("a"), g.Last("b"), g.Last("c"))
	}
}

// TestGuardConcurrent checks fences from many goroutines: whatever the
// order, the guard ends at the highest and never accepted one below the last.
func TestGuardConcurrent(t *testing.T) {
	var g fence.Guard
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() { _ = g.Check(context.Background(), fence.Token{Key: "k", Fence: uint64(i + 1)}) })
	}
	wg.Wait()
	if g.Last("k") != 64 {
		t.Fatalf("Last = %d, want 64", g.Last("k"))
	}
}

func TestParseToken(t *testing.T) {
	want := fence.Token{Key: "orders/17 é=&", Fence: 42}
	key, f := fence.FormatToken(want)
	got, err := fence.ParseToken(key, f)
	if err != nil || got != want {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range [][2]string{{"", "1"}, {"k", ""}, {"k", "0"}, {"k", "-1"}, {"k", "x"}, {"%zz", "1"}, {"k", "18446744073709551616"}} {
		if _, err := fence.ParseToken(bad[0], bad[1]); err == nil {
			t.Errorf("ParseToken(%q, %q) accepted", bad[0], bad[1])
		}
	}
}
