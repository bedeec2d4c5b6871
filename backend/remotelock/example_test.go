package remotelock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
)

// Open a client of the lock service by URL: the token comes from a file
// (or $DISTLOCK_TOKEN), and the service does the waiting. The client's
// watchdog renews the lock while it is held.
func Example() {
	ctx := context.Background()
	client, err := distlock.Open(ctx, "distlock://locks.internal:7420?token_file=/run/secrets/distlock-token")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	l, err := client.Lock(ctx, "nightly-report", distlock.WithWait(30*time.Second), distlock.WithOwner("report-worker-3"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	fmt.Println("fence to pass downstream:", l.Fence())
	<-l.Context().Done() // work under l.Context(): it ends if the lock is lost
}

// Build the backend yourself, over HTTPS with an HTTP client of your own,
// learning of lost locks from the service's event stream.
func ExampleNew() {
	b, err := remotelock.New(nil, "https://locks.example.com",
		remotelock.WithToken("token-from-your-secret-store"),
		remotelock.WithRequestTimeout(3*time.Second),
		remotelock.WithLossWatch())
	if err != nil {
		log.Fatal(err)
	}
	client := distlock.New(b)
	defer client.Close()
}

// An operator's forced release carries its reason to the service's audit
// log, as well as to the client's observers.
func Example_forceRelease() {
	ctx := context.Background()
	client, err := distlock.Open(ctx, "distlocks://locks.example.com?token_file=/etc/distlock/admin-token")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	const reason = "job 4411 hung for 2h; ticket OPS-1234"
	info, err := client.ForceRelease(ctx, "nightly-report", reason)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("removed the hold of", info.Meta.Owner, "fence", info.Fence)
}
