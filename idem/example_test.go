package idem_test

import (
	"context"
	"fmt"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/idem"
)

func Example() {
	ctx := context.Background()
	client := distlock.New(memlock.New())
	defer client.Close()
	k, err := idem.New(client, idem.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	charge := func(ctx context.Context, fence uint64) ([]byte, error) {
		fmt.Println("charging the card") // the side effect, fenced by fence downstream
		return []byte("receipt-1"), nil
	}
	for range 2 { // a client retrying the same request
		r, err := k.Do(ctx, "order-42", []byte(`{"amount":10}`), charge)
		fmt.Printf("%s replayed=%v err=%v\n", r.Value, r.Replayed, err)
	}
	_, err = k.Do(ctx, "order-42", []byte(`{"amount":11}`), charge)
	fmt.Println(err)
	// Output:
	// charging the card
	// receipt-1 replayed=false err=<nil>
	// receipt-1 replayed=true err=<nil>
	// idem: do "order-42": idem: key reused with a different request
}
