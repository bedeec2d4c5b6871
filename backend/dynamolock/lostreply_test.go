package dynamolock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/distlock/distlock/driver"
)

// TestLostReplyRetried: when the reply to a grant or a release is lost
// after DynamoDB applied it, the SDK sends the request again and DynamoDB
// refuses the repeat's condition; the backend still reports the grant (with
// its fence) and the release, instead of a refusal that leaves its own token
// holding the key.
func TestLostReplyRetried(t *testing.T) {
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	var lose atomic.Int32 // UpdateItem replies left to lose
	b := st.over(t, st.client(t, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, loseUpdateReplies(&lose))
	}))
	req := driver.AcquireRequest{Key: uniqueKey(t), Token: token(), TTL: time.Minute}
	lose.Store(1)
	g, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("a grant whose reply was lost: %v", err)
	}
	if lose.Load() > 0 {
		t.Fatal("no reply was lost")
	}
	info, err := b.Inspect(ctx, req.Key)
	if err != nil || !info.Held || info.Fence != g.Fence || g.Fence == 0 {
		t.Fatalf("after the grant: %+v, %v; want held at the granted fence %d", info, err, g.Fence)
	}
	lose.Store(1)
	if err := b.Release(ctx, req.Key, req.Token); err != nil {
		t.Fatalf("a release whose reply was lost: %v", err)
	}
	if info, err := b.Inspect(ctx, req.Key); err != nil || info.Held {
		t.Fatalf("after the release: %+v, %v; want free", info, err)
	}
	// A token that never held the key still gets ErrNotHeld.
	if err := b.Release(ctx, req.Key, token()); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("release by a foreign token: %v, want ErrNotHeld", err)
	}
}

// loseUpdateReplies lets UpdateItem attempts reach the server and, while
// *left is positive, replaces DynamoDB's reply with a retryable error, as a
// connection reset after the request was applied would.
func loseUpdateReplies(left *atomic.Int32) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("TestLoseReply",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleFinalize(ctx, in)
				if err == nil && middleware.GetOperationName(ctx) == "UpdateItem" && left.Add(-1) >= 0 {
					return middleware.FinalizeOutput{}, md, lostReply{}
				}
				return out, md, err
			}), "Retry", middleware.After)
	}
}

// lostReply is an error the SDK's retryer retries.
type lostReply struct{}

func (lostReply) Error() string        { return "reply lost" }
func (lostReply) RetryableError() bool { return true }
