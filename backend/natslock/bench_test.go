package natslock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/natslock"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkShapes measures Lock+Release on one key through distlock.Client
// against the raw floor on the same bucket, in alternating rounds of 256
// acquisitions (locktest.CompareContended): 1, 16 and 64 goroutines
// sharing one client, and 16 clients (each its own connection) with one
// goroutine each. The floor is the plain Key-Value API's loop: Create with
// a time to live of 30s, retried at once while the key exists, then Delete
// on the revision Create returned, through the same number of connections.
// "floor/distlock" is distlock's rate relative to the floor's; the goal is
// at least 0.85.
//
//	go test -run '^$' -bench Shapes -benchtime 2048x ./backend/natslock/
func BenchmarkShapes(b *testing.B) {
	st := newStore(b)
	const lease = 30 * time.Second
	for _, shape := range []struct {
		name             string
		lockers, clients int
	}{{"1", 1, 1}, {"16", 16, 1}, {"64", 64, 1}, {"16clients", 16, 16}} {
		b.Run(shape.name, func(b *testing.B) {
			cs := make([]*distlock.Client, shape.clients)
			kvs := make([]jetstream.KeyValue, shape.clients)
			for i := range cs {
				cs[i] = distlock.New(st.open(b))
				b.Cleanup(func() { _ = cs[i].Close() })
				kvs[i] = st.kv(b)
			}
			key := "bench/" + shape.name
			floor := locktest.Contender{Name: "floor", Lock: func(ctx context.Context, i int) (func() error, error) {
				kv, k := kvs[i%len(kvs)], natslock.EscapeKey(key+"/floor")
				for {
					rev, err := kv.Create(ctx, k, []byte("bench-floor"), jetstream.KeyTTL(lease))
					switch {
					case errors.Is(err, jetstream.ErrKeyExists):
						continue
					case err != nil:
						return nil, fmt.Errorf("create: %w", err)
					}
					return func() error { return kv.Delete(ctx, k, jetstream.LastRevision(rev)) }, nil
				}
			}}
			lock := locktest.Contender{Name: "distlock", Lock: func(ctx context.Context, i int) (func() error, error) {
				l, err := cs[i%len(cs)].Lock(ctx, key+"/distlock", distlock.WithLease(lease), distlock.WithWait(time.Minute))
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(ctx) }, nil
			}}
			locktest.CompareContended(b, locktest.Load{Lockers: shape.lockers}, floor, lock)
		})
	}
}
