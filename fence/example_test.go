package fence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/distlock/distlock/fence"
)

// A holder with fence 7 lost its lock while paused; the next holder got 8
// and wrote. When the first one wakes up, its write is refused.
func ExampleGuard() {
	ctx := context.Background()
	var g fence.Guard
	fmt.Println(g.Check(ctx, fence.Token{Key: "invoice:7", Fence: 7}))
	fmt.Println(g.Check(ctx, fence.Token{Key: "invoice:7", Fence: 8}))
	err := g.Check(ctx, fence.Token{Key: "invoice:7", Fence: 7})
	fmt.Println(errors.Is(err, fence.ErrStale))
	// Output:
	// <nil>
	// <nil>
	// true
}
