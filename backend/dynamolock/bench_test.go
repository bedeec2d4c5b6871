package dynamolock_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/dynamolock"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkLockRelease compares Lock+Release through distlock.Client with
// the floor of the same two raw conditional writes on the same client: the
// grant (token, record version, lease, expiry and fence in one UpdateItem on
// the condition that the key has no holder) and the release (an UpdateItem
// on the condition that the token holds it). "serial" is one goroutine;
// "parallel" is 8 per GOMAXPROCS: 16 with -cpu 2, 64 with -cpu 8. Each
// goroutine works on a key of its own; floor/distlock is distlock's
// throughput relative to the floor's.
//
//	go test -run '^$' -bench LockRelease -cpu 2,8 -count 3 ./backend/dynamolock/
func BenchmarkLockRelease(b *testing.B) {
	st := newStore(b)
	be := st.open(b)
	c := distlock.New(be)
	b.Cleanup(func() { _ = c.Close() })
	db, table := be.Client(), aws.String(st.table)
	const tok = "0123456789abcdef0123456789abcdef"
	grantNames := map[string]string{"#t": "token", "#v": "rvn", "#l": "lease_ms", "#x": dynamolock.ExpiresAttribute, "#f": "fence", "#m": "meta"}
	releaseNames := map[string]string{"#t": "token", "#v": "rvn", "#l": "lease_ms", "#x": dynamolock.ExpiresAttribute, "#m": "meta", "#r": "freed_by"}
	num := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	str := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	floor := locktest.Op{Name: "floor", Do: func(ctx context.Context, key string) error {
		k := map[string]types.AttributeValue{dynamolock.KeyAttribute: str("floor/" + key)}
		now := time.Now()
		if _, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: table, Key: k,
			UpdateExpression:         aws.String("SET #t = :t, #v = :v, #l = :l, #x = :x, #f = if_not_exists(#f, :base) + :one REMOVE #m"),
			ConditionExpression:      aws.String("attribute_not_exists(#t)"),
			ExpressionAttributeNames: grantNames,
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":t": str(tok), ":v": str(tok), ":l": num(30_000), ":x": num(now.Add(24 * time.Hour).Unix()),
				":base": num(now.UnixMicro()), ":one": num(1),
			},
			ReturnValues: types.ReturnValueUpdatedOld,
		}); err != nil {
			return fmt.Errorf("floor grant: %w", err)
		}
		_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: table, Key: k,
			UpdateExpression:          aws.String("REMOVE #t, #v, #l, #m SET #x = :x, #r = :t"),
			ConditionExpression:       aws.String("#t = :t"),
			ExpressionAttributeNames:  releaseNames,
			ExpressionAttributeValues: map[string]types.AttributeValue{":t": str(tok), ":x": num(now.Add(24 * time.Hour).Unix())},
		})
		return err
	}}
	lock := locktest.Op{Name: "distlock", Do: func(ctx context.Context, key string) error {
		l, err := c.TryLock(ctx, key)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}}
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) { locktest.Compare(b, mode, floor, lock) })
	}
}
