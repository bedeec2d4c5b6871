package dynamolock

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/distlock/distlock/driver"
)

// Backend keeps one item per key in a DynamoDB table.
type Backend struct {
	db    *dynamodb.Client
	table *string
	opts  config
	seen  sightings
	// perCall is passed to every request: it counts throttled attempts.
	perCall   []func(*dynamodb.Options)
	throttled atomic.Uint64
	closed    atomic.Bool
	// transport is the HTTP transport of a client Open built, whose idle
	// connections Close closes; nil for a client passed to New.
	transport *http.Transport
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.Lister        = (*Backend)(nil)
	_ driver.ForceReleaser = (*Backend)(nil)
	_ driver.Namer         = (*Backend)(nil)
)

// New returns a backend over the caller's client and an existing table with
// the key schema CreateTable sets. Close does not touch db. A nil client, a
// table name DynamoDB would refuse, or an invalid option returns an error
// matching driver.ErrInvalidOption; New makes no request.
func New(db *dynamodb.Client, table string, opts ...Option) (*Backend, error) {
	if db == nil {
		return nil, fmt.Errorf("dynamolock: New: nil *dynamodb.Client: %w", driver.ErrInvalidOption)
	}
	if err := validTable(table); err != nil {
		return nil, err
	}
	o, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	b := &Backend{db: db, table: aws.String(table), opts: o}
	b.perCall = []func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, b.countThrottles)
	}}
	return b, nil
}

// validTable checks a table name as DynamoDB does: 3 to 255 characters from
// a-z, A-Z, 0-9, '_', '-' and '.'.
func validTable(name string) error {
	ok := len(name) >= 3 && len(name) <= 255
	for _, c := range name {
		ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.')
	}
	if !ok {
		return fmt.Errorf("dynamolock: table name %q: %w: want 3 to 255 characters of a-z, A-Z, 0-9, _, - and .", name, driver.ErrInvalidOption)
	}
	return nil
}

// Name returns "dynamodb".
func (b *Backend) Name() string { return "dynamodb" }

// Client returns the DynamoDB client the backend uses.
func (b *Backend) Client() *dynamodb.Client { return b.db }

// Throttled returns how many requests DynamoDB refused for throttling
// (ProvisionedThroughputExceededException, ThrottlingException and the
// SDK's other throttle codes) since the backend was made. The SDK's retryer
// retries each with its backoff, within its attempts (3 by default), its
// retry quota and the request timeout.
func (b *Backend) Throttled() uint64 { return b.throttled.Load() }

// throttles tells throttling errors as the SDK's retryer does.
var throttles = retry.IsErrorThrottles(retry.DefaultThrottles)

// countThrottles adds, after the SDK's retry middleware, one that counts
// each attempt refused for throttling.
func (b *Backend) countThrottles(s *middleware.Stack) error {
	return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("DistlockThrottleCount",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleFinalize(ctx, in)
			if err != nil && throttles.IsErrorThrottle(err) == aws.TrueTernary {
				b.throttled.Add(1)
			}
			return out, md, err
		}), "Retry", middleware.After)
}

// Close makes every later call fail with an error matching driver.ErrClosed
// and, for a client Open built, closes its idle connections. Calls in
// progress finish. Closing twice is harmless.
func (b *Backend) Close() error {
	if !b.closed.Swap(true) && b.transport != nil {
		b.transport.CloseIdleConnections()
	}
	return nil
}

// errClosed is the cause of every call after Close.
var errClosed = fmt.Errorf("%w: the backend", driver.ErrClosed)

// call runs f with ctx bounded by the request timeout, unless the backend
// is closed.
func (b *Backend) call(ctx context.Context, f func(ctx context.Context) error) error {
	if b.closed.Load() {
		return errClosed
	}
	ctx, cancel := context.WithTimeout(ctx, b.opts.requestTimeout)
	defer cancel()
	return f(ctx)
}

// refused reports whether err is DynamoDB's refusal of a condition, and
// returns the item it refused, if DynamoDB sent it back.
func refused(err error) (map[string]types.AttributeValue, bool) {
	var e *types.ConditionalCheckFailedException
	if errors.As(err, &e) {
		return e.Item, true
	}
	return nil, false
}

// fail wraps a store error (see driver.Wrap), adding driver.ErrClosed once
// the backend is closed, and driver.ErrNoSchema if the table is missing.
func (b *Backend) fail(err error) error {
	if b.closed.Load() && !errors.Is(err, driver.ErrClosed) {
		err = fmt.Errorf("%w: %w", driver.ErrClosed, err)
	}
	return driver.Wrap("dynamolock", noSchema(err))
}
