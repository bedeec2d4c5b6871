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
	replicaA, replicaB := distlock.New(store), distlock.New(store.Connect())
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

// LockAll moves money between two accounts: both are locked, or neither,
// and two transfers naming the accounts in opposite orders never wait on
// each other in a cycle.
func ExampleClient_LockAll() {
	ctx := context.Background()
	client := distlock.New(memlock.New())
	defer client.Close()

	set, err := client.LockAll(ctx, []string{"account:bob", "account:alice"}, distlock.WithWait(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Release(ctx)
	// Write with both fences; stop if set.Done() closes (a lock was lost).
	for _, l := range set.Locks() { // in key order
		fmt.Println(l.Key(), "fence", l.Fence())
	}
	// Output:
	// account:alice fence 1
	// account:bob fence 2
}

// Example_open is the README's usage example (the code between the README
// markers below, which TestReadmeUsageIsTheExample finds in README.md), run
// against the in-process store.
func Example_open() {
	ctx := context.Background()
	if err := chargeOrder(ctx, "mem://"); err != nil {
		fmt.Println(err)
	}
	// Output: charged order 42 with fence 1
}

// README usage begin
func chargeOrder(ctx context.Context, storeURL string) error {
	// storeURL is e.g. "redis://127.0.0.1:6379/0", "etcd://127.0.0.1:2379" or
	// "postgres://app@db/app"; its backend package is imported blank.
	client, err := distlock.Open(ctx, storeURL)
	if err != nil {
		return err
	}
	defer client.Close()

	return client.Do(ctx, "order:42", func(ctx context.Context, l *distlock.Lock) error {
		// ctx is cancelled if the lock is lost; give l.Fence() to the store you write to.
		return charge(ctx, 42, l.Fence())
	})
}

// README usage end

func charge(_ context.Context, order int, fence uint64) error {
	fmt.Println("charged order", order, "with fence", fence)
	return nil
}

func ExampleClient_Semaphore() {
	ctx := context.Background()
	client := distlock.New(memlock.New())
	defer client.Close()

	// At most two exports run at once across every replica.
	exports, err := client.Semaphore("exports", 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	first, _ := exports.TryAcquire(ctx)
	second, _ := exports.TryAcquire(ctx)
	_, err = exports.TryAcquire(ctx)
	fmt.Println("third permit refused:", errors.Is(err, distlock.ErrNotAcquired))

	first.Release(ctx)
	third, err := exports.Acquire(ctx, distlock.WithWait(time.Second))
	fmt.Println("after a release:", err == nil, third.Fence() > second.Fence())
	second.Release(ctx)
	third.Release(ctx)
	// Output:
	// third permit refused: true
	// after a release: true true
}

func ExampleSemaphore_AcquireN() {
	ctx := context.Background()
	client := distlock.New(memlock.New())
	defer client.Close()

	// 8 database connections: a report takes 3 at once, a request 1.
	conns, _ := client.Semaphore("db-conns", 8)
	report, _ := conns.AcquireN(ctx, 3)
	fmt.Println("a report holds 3 as one lock:", report.Fence() > 0)
	_, err := conns.TryAcquireN(ctx, 6)
	fmt.Println("6 more do not fit:", errors.Is(err, distlock.ErrNotAcquired))
	rest, err := conns.TryAcquireN(ctx, 5)
	fmt.Println("5 more do:", err == nil)
	rest.Release(ctx)
	report.Release(ctx)
	// Output:
	// a report holds 3 as one lock: true
	// 6 more do not fit: true
	// 5 more do: true
}

func ExampleClient_RWMutex() {
	ctx := context.Background()
	store := memlock.New()
	replicaA, replicaB := distlock.New(store), distlock.New(store.Connect())
	defer replicaA.Close()
	defer replicaB.Close()

	accountA, _ := replicaA.RWMutex("account:42")
	accountB, _ := replicaB.RWMutex("account:42")

	r1, _ := accountA.RLock(ctx)
	r2, err := accountB.RLock(ctx)
	fmt.Println("two readers at once:", err == nil)
	_, err = accountB.TryLock(ctx)
	fmt.Println("writer refused while they read:", errors.Is(err, distlock.ErrNotAcquired))

	r1.Release(ctx)
	r2.Release(ctx)
	w, _ := accountB.Lock(ctx, distlock.WithWait(time.Second))
	fmt.Println("writer's fence above the readers':", w.Fence() > r2.Fence())
	w.Release(ctx)
	// Output:
	// two readers at once: true
	// writer refused while they read: true
	// writer's fence above the readers': true
}

func ExampleRWMutex_Downgrade() {
	ctx := context.Background()
	store := memlock.New()
	writer, reader := distlock.New(store), distlock.New(store.Connect())
	defer writer.Close()
	defer reader.Close()

	prices, _ := writer.RWMutex("prices")
	w, _ := prices.Lock(ctx)
	// ... write the new prices, then keep reading them while others read too:
	// no other writer can change them in between.
	_ = prices.Downgrade(ctx, w)

	other, _ := reader.RWMutex("prices")
	r, err := other.TryRLock(ctx)
	fmt.Println("a reader joins the downgraded writer:", err == nil)
	_, err = other.TryLock(ctx)
	fmt.Println("a writer is still refused:", errors.Is(err, distlock.ErrNotAcquired))
	r.Release(ctx)
	w.Release(ctx)
	// Output:
	// a reader joins the downgraded writer: true
	// a writer is still refused: true
}

func ExampleClient_LockPath() {
	ctx := context.Background()
	store := memlock.New()
	migrator, worker := distlock.New(store), distlock.New(store.Connect())
	defer migrator.Close()
	defer worker.Close()

	row7, _ := worker.LockPath(ctx, []string{"orders", "orders/7"})
	row8, err := worker.LockPath(ctx, []string{"orders", "orders/8"})
	fmt.Println("two rows side by side:", err == nil)
	_, err = migrator.LockPath(ctx, []string{"orders"}, distlock.WithWait(0))
	fmt.Println("the table waits for its rows:", errors.Is(err, distlock.ErrNotAcquired))
	row7.Release(ctx)
	row8.Release(ctx)

	table, _ := migrator.LockPath(ctx, []string{"orders"})
	_, err = worker.LockPath(ctx, []string{"orders", "orders/9"}, distlock.WithWait(0))
	fmt.Println("a row waits for the table:", errors.Is(err, distlock.ErrNotAcquired))
	table.Release(ctx)
	// Output:
	// two rows side by side: true
	// the table waits for its rows: true
	// a row waits for the table: true
}

func ExampleClient_RequestRelease() {
	ctx := context.Background()
	store := memlock.New()
	worker, operator := distlock.New(store), distlock.New(store.Connect())
	defer worker.Close()
	defer operator.Close()

	l, _ := worker.TryLock(ctx, "reindex")
	done := make(chan struct{})
	go func() { // the holder: batches until asked to let go
		defer close(done)
		for {
			select {
			case <-l.ReleaseRequested():
				fmt.Printf("asked (%s): releasing after this batch\n", l.ReleaseReason())
				_ = l.Release(ctx)
				return
			case <-time.After(10 * time.Millisecond): // one batch of work
			}
		}
	}()

	time.Sleep(25 * time.Millisecond)
	if _, err := operator.RequestRelease(ctx, "reindex", "deploy at 02:00"); err != nil {
		fmt.Println("request:", err)
	}
	<-done
	_, err := operator.TryLock(ctx, "reindex")
	fmt.Println("free after the holder let go:", err == nil)
	// Output:
	// asked (deploy at 02:00): releasing after this batch
	// free after the holder let go: true
}
