package policy_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/policy"
)

func Example() {
	cfg, err := policy.Load(strings.NewReader(`
groups:
  - name: payments
    prefixes: ["payment/"]
    critical: true
    lease: 10s
    max_lease: 1m
    max_wait: 5s
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := policy.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The policy is also the observer that measures the store's latency.
	client := distlock.New(memlock.New(), distlock.WithPolicy(p), distlock.WithObserver(p))
	defer client.Close()
	ctx := context.Background()

	_, err = client.TryLock(ctx, "payment/42", distlock.WithLease(time.Hour))
	fmt.Println(err)

	l, err := client.Lock(ctx, "payment/42") // waits at most 5s, with a 10s lease renewed by the watchdog
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Release(ctx)
	fmt.Println("holding", l.Key(), "in group", p.Group(l.Key()))
	// Output:
	// distlock: lock "payment/42": invalid option: lease 1h0m0s exceeds max_lease 1m0s of group "payments"
	// holding payment/42 in group payments
}

func ExampleStripe() {
	// Seats of one row are guarded together; rows run in parallel.
	fmt.Println(policy.Stripe("concert-7/seats", "row-1", 8))
	fmt.Println(policy.Stripe("concert-7/seats", "row-2", 8))
	// Output:
	// concert-7/seats#1
	// concert-7/seats#0
}
