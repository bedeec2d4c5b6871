// Command checkout shows two replicas of a payment service racing to charge
// the same order: the lock lets exactly one of them charge it, and the fence
// lets the payment ledger refuse a charge from a holder whose lock ran out.
//
//	go run ./examples/checkout                      # in-process store
//	go run ./examples/checkout -store redis://127.0.0.1:6379/0
//	go run ./examples/checkout -store etcd://127.0.0.1:2379
//
// Any URL that distlock.Open accepts works (postgres://, mysql://, mysql+table://, redlock://, zk://).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/backend/etcdlock"
	_ "github.com/distlock/distlock/backend/memlock"
	_ "github.com/distlock/distlock/backend/mysqllock"
	_ "github.com/distlock/distlock/backend/pglock"
	_ "github.com/distlock/distlock/backend/redislock"
	_ "github.com/distlock/distlock/backend/redlock"
	_ "github.com/distlock/distlock/backend/sqllock"
	_ "github.com/distlock/distlock/backend/zklock"
)

// ledger is the downstream system that records charges. It refuses a charge
// whose fence is not newer than the last it accepted for the order.
type ledger struct {
	mu        sync.Mutex
	charged   map[string]string
	lastFence map[string]uint64
}

func (l *ledger) charge(order, replica string, fence uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if fence <= l.lastFence[order] {
		return fmt.Errorf("stale fence %d for %s", fence, order)
	}
	l.lastFence[order] = fence
	if by, ok := l.charged[order]; ok {
		return fmt.Errorf("%s already charged by %s", order, by)
	}
	l.charged[order] = replica
	return nil
}

func main() {
	store := flag.String("store", "mem://checkout", "lock store URL")
	order := flag.String("order", "order-1001", "order both replicas try to charge")
	flag.Parse()
	if err := run(*store, *order); err != nil {
		log.Fatal(err)
	}
}

func run(store, order string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	book := &ledger{charged: map[string]string{}, lastFence: map[string]uint64{}}

	var wg sync.WaitGroup
	results := make(chan string, 2)
	for _, replica := range []string{"replica-a", "replica-b"} {
		client, err := distlock.Open(ctx, store)
		if err != nil {
			return err
		}
		defer client.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := client.TryLock(ctx, "charge:"+order, distlock.WithOwner(replica), distlock.WithBusinessID(order))
			if errors.Is(err, distlock.ErrNotAcquired) {
				results <- fmt.Sprintf("%s: %s is being charged elsewhere, skipping", replica, order)
				return
			}
			if err != nil {
				results <- fmt.Sprintf("%s: lock failed: %v", replica, err)
				return
			}
			defer l.Release(ctx)
			time.Sleep(100 * time.Millisecond) // call the payment provider
			if err := book.charge(order, replica, l.Fence()); err != nil {
				results <- fmt.Sprintf("%s: refused: %v", replica, err)
				return
			}
			results <- fmt.Sprintf("%s: charged %s (fence %d)", replica, order, l.Fence())
		}()
	}
	wg.Wait()
	close(results)
	for r := range results {
		fmt.Println(r)
	}
	if len(book.charged) != 1 {
		return fmt.Errorf("%s charged %d times", order, len(book.charged))
	}
	fmt.Printf("%s charged exactly once, by %s\n", order, book.charged[order])
	return nil
}
