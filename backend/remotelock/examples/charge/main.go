// Command charge is the worked example of docs/clients.md in Go: two
// replicas race to charge one order, and the fence refuses the stale write.
// It reads the service's URL and two tokens from DISTLOCK_URL,
// DISTLOCK_TOKEN (a client's) and DISTLOCK_ADMIN_TOKEN (an admin's, for the
// operator's forced release).
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
)

// Ledger stands in for the payment store: per order, the highest fence it
// has accepted, refusing a charge with a lower one. In production this is
// your database's conditional UPDATE ... WHERE fence <= $fence.
type Ledger struct{ fences map[string]uint64 }

// Charge records a charge of order under fence, unless a newer holder
// already charged it.
func (l *Ledger) Charge(order string, fence uint64) error {
	if last := l.fences[order]; fence < last {
		return fmt.Errorf("fence %d is older than %d", fence, last)
	}
	l.fences[order] = fence
	return nil
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	replicaA, err := client(os.Getenv("DISTLOCK_TOKEN"))
	if err != nil {
		return err
	}
	defer replicaA.Close()
	replicaB, err := client(os.Getenv("DISTLOCK_TOKEN"))
	if err != nil {
		return err
	}
	defer replicaB.Close()
	operator, err := client(os.Getenv("DISTLOCK_ADMIN_TOKEN"))
	if err != nil {
		return err
	}
	defer operator.Close()
	ledger := &Ledger{fences: map[string]uint64{}}

	a, err := replicaA.Lock(ctx, "orders/42", distlock.WithLease(10*time.Second), distlock.WithOwner("replica-a"))
	if err != nil {
		return err
	}
	fmt.Printf("A holds orders/42 with fence %d\n", a.Fence())

	// A stalls; an operator clears what looks like a stuck job.
	if _, err := operator.ForceRelease(ctx, "orders/42", "replica-a looks stuck"); err != nil {
		return err
	}

	b, err := replicaB.Lock(ctx, "orders/42", distlock.WithLease(10*time.Second),
		distlock.WithWait(5*time.Second), distlock.WithOwner("replica-b"))
	if err != nil {
		return err
	}
	defer b.Release(ctx)
	fmt.Printf("B holds orders/42 with fence %d\n", b.Fence())
	if err := ledger.Charge("42", b.Fence()); err != nil {
		return err
	}
	fmt.Printf("B charged order 42 (fence %d)\n", b.Fence())

	// A wakes and charges as if it still held the lock.
	if err := ledger.Charge("42", a.Fence()); err != nil {
		fmt.Printf("A refused: %v\n", err)
		return nil
	}
	return errors.New("A's stale charge was accepted")
}

// client is a distlock client of the service at $DISTLOCK_URL with token.
func client(token string) (*distlock.Client, error) {
	b, err := remotelock.New(nil, os.Getenv("DISTLOCK_URL"), remotelock.WithToken(token))
	if err != nil {
		return nil, err
	}
	return distlock.New(b), nil
}
