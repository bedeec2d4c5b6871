package locktest

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// lockPath runs the contract of hierarchical locks (Client.LockPath and
// RLockPath) on backends that keep read-write locks; the others must say
// errors.ErrUnsupported.
func (s *suite) lockPath(t *testing.T) {
	s.capability(t, func(b driver.Backend) bool { _, ok := b.(driver.RWLocks); return ok },
		func(c *distlock.Client) error {
			_, err := c.LockPath(testContext(t, time.Minute), []string{s.key(t)}, distlock.WithWait(0))
			return err
		},
		[]subtest{
			{"TableExcludesRows", s.pathTableExcludesRows},
			{"NeverTableWithRows", s.pathContended},
			{"BadPaths", s.pathBad},
		})
}

// A table's lock refuses every lock of its rows, and they refuse it; locks
// of two rows hold side by side, two of one row do not; a table lock that
// waits keeps new row locks out and gets in once the rows are released.
func (s *suite) pathTableExcludesRows(t *testing.T) {
	ctx := testContext(t, time.Minute)
	table := s.key(t)
	row := func(i string) []string { return []string{table, table + "/" + i} }
	a, b := s.client(t), s.client(t)
	now := distlock.WithWait(0)

	tl, err := a.LockPath(ctx, []string{table}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, take := range []func() (*distlock.LockSet, error){
		func() (*distlock.LockSet, error) { return b.LockPath(ctx, row("1"), now) },
		func() (*distlock.LockSet, error) { return b.RLockPath(ctx, row("1"), now) },
		func() (*distlock.LockSet, error) { return b.RLockPath(ctx, []string{table}, now) },
	} {
		if _, err := take(); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("a lock in the table while the table is locked: %v, want ErrNotAcquired", err)
		}
	}
	if err := tl.Release(ctx); err != nil {
		t.Fatal(err)
	}

	r1, err := a.LockPath(ctx, row("1"), now)
	if err != nil {
		t.Fatalf("row 1 once the table is free: %v", err)
	}
	r2, err := b.LockPath(ctx, row("2"), now)
	if err != nil {
		t.Fatalf("row 2 beside row 1: %v; rows hold side by side", err)
	}
	if _, err := b.LockPath(ctx, row("1"), now); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a second lock of row 1: %v, want ErrNotAcquired", err)
	}
	if _, err := b.LockPath(ctx, []string{table}, now); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("the table while rows are locked: %v, want ErrNotAcquired", err)
	}
	if f, ok := r1.Fence(table + "/1"); !ok || f == 0 {
		t.Errorf("row 1's fence = %d, %v; want the row's own", f, ok)
	}

	got := make(chan *distlock.LockSet, 1)
	fail := make(chan error, 1)
	go func() {
		l, err := b.LockPath(ctx, []string{table}, distlock.WithWait(30*time.Second))
		if err != nil {
			fail <- err
			return
		}
		got <- l
	}()
	eventuallyWriterWaits(t, newRWMutex(t, a, table))
	if _, err := a.LockPath(ctx, row("3"), now); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a new row while the table lock waits: %v, want ErrNotAcquired", err)
	}
	for _, r := range []*distlock.LockSet{r1, r2} {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case l := <-got:
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case err := <-fail:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the table lock never got in after the rows were released")
	}
	if err := r1.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("releasing a path twice: %v, want ErrNotHeld", err)
	}
}

// Goroutines on four clients lock the table or one of three rows in turn:
// the table's holder is never inside with a row's, a row never has two,
// and rows do hold side by side. Three goroutines a client: a row's path
// holds two locks, and on stores that pin a connection per held lock
// (pglock) a client's pool must have room for them.
func (s *suite) pathContended(t *testing.T) {
	const goroutines = 12
	ctx := testContext(t, 3*time.Minute)
	table := s.key(t)
	clients := []*distlock.Client{s.client(t), s.client(t), s.client(t), s.client(t)}
	rounds := max(s.h.Iterations/10, 10)
	var (
		tables, rowsIn, mostRows atomic.Int32
		rows                     [3]atomic.Int32
		broken                   atomic.Bool
		wg                       sync.WaitGroup
		errs                     = make(chan error, goroutines)
	)
	for g := range goroutines {
		wg.Go(func() {
			c := clients[g%len(clients)]
			for i := range rounds {
				row := (g + i) % 4 // 3: the table
				path := []string{table}
				if row < 3 {
					path = append(path, table+"/"+string(rune('a'+row)))
				}
				l, err := c.LockPath(ctx, path, distlock.WithWait(time.Minute))
				if err != nil {
					errs <- err
					return
				}
				if row == 3 {
					if tables.Add(1) != 1 || rowsIn.Load() != 0 {
						broken.Store(true)
					}
				} else {
					n := rowsIn.Add(1)
					if rows[row].Add(1) != 1 || tables.Load() != 0 {
						broken.Store(true)
					}
					for most := mostRows.Load(); n > most && !mostRows.CompareAndSwap(most, n); most = mostRows.Load() {
					}
				}
				time.Sleep(time.Millisecond)
				if row == 3 {
					tables.Add(-1)
				} else {
					rows[row].Add(-1)
					rowsIn.Add(-1)
				}
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if broken.Load() {
		t.Fatal("the table's holder was inside with a row's, or a row had two holders")
	}
	if mostRows.Load() < 2 {
		t.Errorf("at most %d row held at once: rows do not hold side by side", mostRows.Load())
	}
}

// Paths that are empty, too deep, name a node twice or hold a bad key are
// refused and take nothing.
func (s *suite) pathBad(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := s.client(t)
	table := s.key(t)
	deep := make([]string, distlock.MaxPathDepth+1)
	for i := range deep {
		deep[i] = table + "/" + strings.Repeat("n", i+1)
	}
	for _, p := range []struct {
		path []string
		want error
	}{
		{nil, distlock.ErrInvalidOption},
		{deep, distlock.ErrInvalidOption},
		{[]string{table, table}, distlock.ErrInvalidOption},
		{[]string{table, "bad\x00key"}, distlock.ErrInvalidKey},
	} {
		if _, err := c.LockPath(ctx, p.path, distlock.WithWait(0)); !errors.Is(err, p.want) {
			t.Errorf("LockPath of %d names %q: %v, want %v", len(p.path), p.path, err, p.want)
		}
	}
	if info, err := newRWMutex(t, c, table).Inspect(ctx); err != nil || len(info.Held) != 0 {
		t.Errorf("the table after refused paths: %+v, %v; want free", info, err)
	}
}
