package redislock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testserver"
)

// TestLateRequestsDuringClose makes requests through a client that does not
// honour context deadlines itself, so the adapter tracks each one, while the
// adapter closes: the race detector must see no WaitGroup reuse, and every
// request must return.
func TestLateRequestsDuringClose(t *testing.T) {
	srv := testserver.Redis(t)
	for range 20 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		g := &goRedis{c: c}
		for i, src := range scriptSources {
			g.scripts[i] = redis.NewScript(src)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 20 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_ = g.run(ctx, 0, []string{"late-during-close"}, []string{"x"}).Err()
					cancel()
				}
			})
		}
		time.Sleep(time.Millisecond)
		if err := g.close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		_ = c.Close()
	}
}
