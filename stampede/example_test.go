package stampede_test

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/stampede"
)

// Concurrent callers of a missing key share one load; later ones hit.
func Example() {
	ctx := context.Background()
	client := distlock.New(memlock.New())
	defer client.Close()

	cache, err := stampede.New(client, stampede.NewMemoryStore(),
		stampede.WithTTL(time.Minute),   // fresh for a minute,
		stampede.WithStale(time.Minute)) // then served stale for one more while one caller refreshes
	if err != nil {
		panic(err)
	}
	defer cache.Close()

	load := func(ctx context.Context) ([]byte, error) {
		return []byte("report for 2026-11-30"), nil // the expensive query
	}
	for range 3 {
		v, err := cache.Get(ctx, "daily-report", load)
		if err != nil {
			panic(err)
		}
		fmt.Println(string(v))
	}
	s := cache.Stats()
	fmt.Println("loads:", s.Loads, "hits:", s.Hits)
	// Output:
	// report for 2026-11-30
	// report for 2026-11-30
	// report for 2026-11-30
	// loads: 1 hits: 2
}
