package dynamolock_test

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/dynamolock"
)

// Over a client you built: create the table once (at deployment or
// start-up), then lock.
func ExampleNew() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("eu-west-1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	db := dynamodb.NewFromConfig(cfg)
	if err := dynamolock.CreateTable(ctx, db, "locks", dynamolock.TableOptions{TimeToLive: true}); err != nil {
		fmt.Println(err)
		return
	}
	b, err := dynamolock.New(db, "locks") // an invalid option is an error here
	if err != nil {
		fmt.Println(err)
		return
	}
	client := distlock.New(b)
	defer client.Close()

	err = client.Do(ctx, "invoice:7", func(ctx context.Context, l *distlock.Lock) error {
		fmt.Println("sending invoice 7 under fence", l.Fence())
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
}

// By URL, with credentials from the SDK's standard chain (environment,
// profile, role).
func ExampleOpen() {
	ctx := context.Background()
	client, err := distlock.Open(ctx, "dynamodb://locks?region=eu-west-1&request_timeout=2s")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	l, err := client.TryLock(ctx, "nightly-report")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Release(ctx)
	fmt.Println("running the report under fence", l.Fence())
}
