package occ_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/distlock/distlock/occ"
)

// Eight goroutines increment one counter without a lock: each reads, adds
// one, and swaps only if nobody changed the counter meanwhile.
func ExampleUpdate() {
	ctx := context.Background()
	var counter occ.Value[int]
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			err := occ.Update(ctx, occ.Policy{MaxAttempts: 100}, &counter, func(n int) (int, error) { return n + 1, nil })
			if err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	n, version := counter.Load()
	fmt.Printf("counter %d at version %d\n", n, version)
	// Output: counter 8 at version 8
}

// Five workers read a paid order at the same version and all try to ship
// it: exactly one wins, the others see a conflict and do not ship twice.
func ExampleValue_CompareAndSwap() {
	var order occ.Value[string]
	version, _ := order.CompareAndSwap(0, "paid")

	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		won, conflicting int
	)
	for worker := range 5 {
		wg.Go(func() {
			_, err := order.CompareAndSwap(version, fmt.Sprintf("shipped by worker %d", worker))
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, occ.ErrConflict) {
				conflicting++
			} else {
				won++
			}
		})
	}
	wg.Wait()
	fmt.Printf("%d won, %d saw a conflict\n", won, conflicting)
	// Output: 1 won, 4 saw a conflict
}

// The same with a version column: the UPDATE matches only the version that
// was read, so of concurrent writers exactly one changes the row.
func ExampleUpdateVersion() {
	ctx := context.Background()
	var db *sql.DB // sql.Open("pgx", ...) or sql.Open("mysql", ...)

	err := occ.Retry(ctx, occ.Policy{}, func(ctx context.Context) error {
		var status string
		var version int64
		if err := db.QueryRowContext(ctx, "SELECT status, version FROM orders WHERE id = $1", 42).Scan(&status, &version); err != nil {
			return err
		}
		if status != "paid" {
			return fmt.Errorf("order 42 is %s, not paid", status)
		}
		return occ.UpdateVersion(ctx, occ.SQL(db),
			"UPDATE orders SET status = 'shipped', version = version + 1 WHERE id = $1 AND version = $2", 42, version)
	})
	if err != nil {
		fmt.Println("not shipped:", err)
	}
}
