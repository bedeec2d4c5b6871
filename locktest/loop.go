package locktest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// Loop calls op b.N times, each caller on a key of its own: in the
// benchmark's goroutine when mode is "serial" (latency), else from 8
// goroutines per CPU (throughput). Backends use it to compare Lock+Release
// with their store's raw floor in one run.
func Loop(b *testing.B, mode string, op func(ctx context.Context, key string) error) {
	ctx := context.Background()
	var n atomic.Int64
	if mode == "serial" {
		key := fmt.Sprintf("bench-%d", n.Add(1))
		for b.Loop() {
			if err := op(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Sprintf("bench-%d", n.Add(1))
		for pb.Next() {
			if err := op(ctx, key); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
