package redislock_test

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
)

// A backend on the go-redis client an application already has.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	backend, err := redislock.New(rdb, redislock.WithPrefix("billing:"))
	if err != nil {
		log.Fatal(err)
	}
	client := distlock.New(backend)
	defer client.Close()

	ctx := context.Background()
	err = client.Do(ctx, "invoice:42", func(ctx context.Context, l *distlock.Lock) error {
		// Pass l.Fence() to the store you write to, so that it can refuse a
		// write from a holder whose lock has expired.
		return nil
	})
	if err != nil {
		log.Print(err)
	}
}

// distlock.Open builds a rueidis client after the blank import of redislock.
func ExampleOpen() {
	ctx := context.Background()
	client, err := distlock.Open(ctx, "redis-sentinel://127.0.0.1:26379/mymaster?addr=127.0.0.1:26380")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
}
