package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/driver"
)

// stallGate is the lock a test trigger waits for: the advisory lock id on
// PostgreSQL, the GET_LOCK name on MariaDB.
const stallGate = 73110

// stallSQL is, per dialect, the SQL that installs a trigger stalling the
// insertion (or takeover) of a lease row with token {token} until the gate is
// free: the trigger runs after the statement computed the row, fence
// included, and before the row is written.
var stallSQL = map[string][]string{
	"postgres": {
		`CREATE FUNCTION sqllock_test_stall() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.token = '{token}' THEN PERFORM pg_advisory_xact_lock({gate}); END IF;
	RETURN NEW;
END $$`,
		`CREATE TRIGGER sqllock_test_stall BEFORE INSERT OR UPDATE ON distlock_leases
FOR EACH ROW EXECUTE FUNCTION sqllock_test_stall()`,
	},
	"mariadb": {
		`CREATE TRIGGER sqllock_test_stall BEFORE INSERT ON distlock_leases FOR EACH ROW
SET @stalled = IF(NEW.token = '{token}', GET_LOCK('sqllock-{gate}', 60), 0)`,
	},
}

// gateSQL is, per dialect, how to close the gate, how to open it again, and
// how many sessions wait on a lock (the gate, or a row or key).
var gateSQL = map[string][3]string{
	"postgres": {
		fmt.Sprintf("SELECT pg_advisory_lock(%d)", stallGate),
		fmt.Sprintf("SELECT pg_advisory_unlock(%d)", stallGate),
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
	},
	"mariadb": {
		fmt.Sprintf("SELECT GET_LOCK('sqllock-%d', 0)", stallGate),
		fmt.Sprintf("SELECT RELEASE_LOCK('sqllock-%d')", stallGate),
		`SELECT (SELECT count(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock')
		      + (SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT')`,
	},
}

// TestFenceDrawnAfterWin stalls acquirer A after its statement computed the
// row it writes (fence included), with a trigger, lets B acquire and release
// the same key meanwhile, then lets A go on. Whoever is granted later must hold a higher
// fence than whoever was granted earlier.
func TestFenceDrawnAfterWin(t *testing.T) {
	t.Run("postgres", func(t *testing.T) { fenceDrawnAfterWin(t, postgres(t)) })
	t.Run("mariadb", func(t *testing.T) { fenceDrawnAfterWin(t, mariadb(t)) })
}

type grantResult struct {
	fence uint64
	err   error
}

func fenceDrawnAfterWin(t *testing.T, st store) {
	ctx := testContext(t, time.Minute)
	admin, a, b := st.open(t), st.open(t), st.open(t)
	for _, be := range []*sqllock.Backend{admin, a, b} {
		t.Cleanup(func() { _ = be.Close() })
	}
	if err := admin.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key, tokenA := uniqueKey(t), fmt.Sprintf("%032x", time.Now().UnixNano())
	// A first grant, released: the key has a history, and on MariaDB a row.
	first := driver.AcquireRequest{Key: key, Token: fmt.Sprintf("%032x", time.Now().UnixNano()-1), TTL: time.Minute}
	if _, err := b.Acquire(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, key, first.Token); err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer("{token}", tokenA, "{gate}", strconv.Itoa(stallGate))
	for _, q := range stallSQL[st.dialect.Name()] {
		if _, err := admin.DB().ExecContext(ctx, r.Replace(q)); err != nil {
			t.Fatal(err)
		}
	}
	gate, err := admin.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	g := gateSQL[st.dialect.Name()]
	if _, err := gate.ExecContext(ctx, g[0]); err != nil {
		t.Fatal(err)
	}
	waiting := func() int {
		var n int
		if err := admin.DB().QueryRowContext(ctx, g[2]).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	aDone := acquireAsync(ctx, a, driver.AcquireRequest{Key: key, Token: tokenA, TTL: time.Minute})
	if !waitUntil(func() bool { return waiting() >= 1 }) {
		t.Fatal("A never stalled in the trigger")
	}
	tokenB := fmt.Sprintf("%032x", time.Now().UnixNano()+1)
	bDone := acquireAsync(ctx, b, driver.AcquireRequest{Key: key, Token: tokenB, TTL: time.Minute})
	var bFirst *grantResult // B's result if it came while A was stalled
	if !waitUntil(func() bool {
		select {
		case r := <-bDone:
			bFirst = &r
			return true
		default:
			return waiting() >= 2 // B waits for A
		}
	}) {
		t.Fatal("B neither finished nor waited")
	}
	if bFirst != nil && bFirst.err == nil {
		if err := b.Release(ctx, key, tokenB); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gate.ExecContext(ctx, g[1]); err != nil {
		t.Fatal(err)
	}
	ra := receive(t, aDone, "A")
	if bFirst == nil {
		r := receive(t, bDone, "B")
		bFirst = &r
		if r.err == nil {
			t.Fatalf("B was granted (fence %d) while A held the key (fence %d, %v)", r.fence, ra.fence, ra.err)
		}
	}
	if ra.err != nil {
		t.Fatalf("A: %v", ra.err)
	}
	if bFirst.err == nil && ra.fence <= bFirst.fence {
		t.Fatalf("A was granted fence %d after B was granted fence %d", ra.fence, bFirst.fence)
	}
	if bFirst.err != nil && !errors.Is(bFirst.err, driver.ErrNotAcquired) {
		t.Fatalf("B: %v", bFirst.err)
	}
}

func acquireAsync(ctx context.Context, b driver.Backend, req driver.AcquireRequest) <-chan grantResult {
	ch := make(chan grantResult, 1)
	go func() {
		g, err := b.Acquire(ctx, req)
		ch <- grantResult{g.Fence, err}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan grantResult, who string) grantResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no result within 20s", who)
		return grantResult{}
	}
}

// waitUntil polls cond every 5ms for at most 10s.
func waitUntil(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// TestFencesInGrantOrder has goroutines of several clients take one key in
// turn, each through its own backend and connection pool; the fences seen
// inside the lock, in the order the holders got it, must strictly increase.
func TestFencesInGrantOrder(t *testing.T) {
	t.Run("postgres", func(t *testing.T) { fencesInGrantOrder(t, postgres(t)) })
	t.Run("mariadb", func(t *testing.T) { fencesInGrantOrder(t, mariadb(t)) })
}

func fencesInGrantOrder(t *testing.T, st store) {
	const clients, perClient, rounds = 4, 4, 25
	ctx := testContext(t, 2*time.Minute)
	st.admin(t) // makes the tables
	key := uniqueKey(t)
	var (
		mu     sync.Mutex
		fences []uint64
		wg     sync.WaitGroup
		errs   = make(chan error, clients*perClient)
	)
	for range clients {
		c := st.client(t)
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					if err := takeAndRecord(ctx, c, key, &mu, &fences); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("grant %d got fence %d after fence %d", i, fences[i], fences[i-1])
		}
	}
	if len(fences) != clients*perClient*rounds {
		t.Fatalf("%d grants, want %d", len(fences), clients*perClient*rounds)
	}
}

// takeAndRecord locks key, appends its fence while holding it, and releases.
func takeAndRecord(ctx context.Context, c *distlock.Client, key string, mu *sync.Mutex, fences *[]uint64) error {
	l, err := c.Lock(ctx, key, distlock.WithWait(time.Minute))
	if err != nil {
		return err
	}
	mu.Lock()
	*fences = append(*fences, l.Fence())
	mu.Unlock()
	return l.Release(ctx)
}
