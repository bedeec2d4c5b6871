package election_test

import (
	"context"
	"fmt"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/election"
)

// One replica leads a singleton worker while the others wait in Campaign;
// anyone can ask who leads.
func Example() {
	ctx := context.Background()
	client := distlock.New(memlock.New())
	defer client.Close()

	e, err := election.New(client, "nightly-report")
	if err != nil {
		panic(err)
	}
	term, err := e.Campaign(ctx, "replica-a:8080")
	if err != nil {
		panic(err)
	}
	leader, _ := e.Leader(ctx)
	fmt.Println("leader:", leader.Value, "fence:", leader.Fence == term.Fence())

	// The worker runs under term.Context(), which ends if the term is lost.
	_ = term.Resign(ctx)
	_, err = e.Leader(ctx)
	fmt.Println("after resigning:", err)
	// Output:
	// leader: replica-a:8080 fence: true
	// after resigning: election "nightly-report": election: no leader
}
