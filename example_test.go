package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
)

func ExampleClient_Lock() {
	ctx := context.Background()
	client := distlock.New(memlock.New())
	defer client.Close()

	l, err := client.Lock(ctx, "invoice:7", distlock.WithWait(5*time.Second))
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer l.Release(ctx)
	fmt.Println("holding", l.Key(), "with fence", l.Fence())
	// Output: holding invoice:7 with fence 1
}

func ExampleClient_TryLock() {
	ctx := context.Background()
	store := memlock.New()
	replicaA, replicaB := distlock.New(store), distlock.New(store)
	defer replicaA.Close()
	defer replicaB.Close()

	l, _ := replicaA.TryLock(ctx, "nightly-report")
	defer l.Release(ctx)

	_, err := replicaB.TryLock(ctx, "nightly-report")
	fmt.Println("replica B acquired:", !errors.Is(err, distlock.ErrNotAcquired))
	// Output: replica B acquired: false
}

func ExampleClient_Do() {
	ctx := context.Background()
	client := distlock.New(memlock.New())
	defer client.Close()

	err := client.Do(ctx, "seat:12A", func(ctx context.Context, l *distlock.Lock) error {
		// ctx is cancelled if the lock is lost; pass l.Fence() to the store
		// you write to so that it can refuse a stale holder.
		fmt.Println("booking seat with fence", l.Fence())
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// booking seat with fence 1
	// err: <nil>
}
