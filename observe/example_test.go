package observe_test

import (
	"context"
	"fmt"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/observe"
)

// printer prints every event but the store calls: its kind, key and
// reason, if any.
type printer struct{}

func (printer) AcquireStarted(ctx context.Context, e observe.Event) context.Context {
	fmt.Println(e.Kind, e.Key)
	return ctx
}

func (printer) Observe(_ context.Context, e observe.Event) {
	switch {
	case e.Kind == observe.StoreCall:
	case e.Reason != "":
		fmt.Println(e.Kind, e.Key, e.Reason)
	default:
		fmt.Println(e.Kind, e.Key)
	}
}

// An observer of your own sees every step of a lock's life; Join combines
// it with others, such as package telemetry's.
func Example() {
	ctx := context.Background()
	client := distlock.New(memlock.New(), distlock.WithObserver(observe.Join(printer{})))
	defer client.Close()

	l, err := client.Lock(ctx, "report")
	if err != nil {
		panic(err)
	}
	if err := l.Release(ctx); err != nil {
		panic(err)
	}
	// Output:
	// acquire_start report
	// acquired report
	// released report released
}
