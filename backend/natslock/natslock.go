package natslock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/distlock/distlock/driver"
)

// Backend keeps one key of a JetStream Key-Value bucket per held lock.
type Backend struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	bucket string
	// stream is the bucket's stream, subjects the prefix of its keys'
	// subjects, getSubject the API subject of a read from its leader,
	// notices the prefix of the subjects of release notices.
	stream, subjects, getSubject, notices string
	opts                                  config
	holds                                 holds
	closed                                atomic.Bool
	// own is set when Open made nc, which Close then closes.
	own bool
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.Notifier      = (*Backend)(nil)
	_ driver.Lister        = (*Backend)(nil)
	_ driver.ForceReleaser = (*Backend)(nil)
	_ driver.Namer         = (*Backend)(nil)
)

// New returns a backend over the caller's connection and an existing bucket
// made as CreateBucket makes it (per-key time to live on). Close does not
// close nc. A nil connection, a bucket name JetStream would refuse, or an
// invalid option returns an error matching driver.ErrInvalidOption; New
// makes no request.
func New(nc *nats.Conn, bucket string, opts ...Option) (*Backend, error) {
	if nc == nil {
		return nil, fmt.Errorf("natslock: New: nil *nats.Conn: %w", driver.ErrInvalidOption)
	}
	if err := validBucket(bucket); err != nil {
		return nil, err
	}
	o, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natslock: %w", err)
	}
	stream := "KV_" + bucket
	return &Backend{
		nc: nc, js: js, bucket: bucket, opts: o,
		stream: stream, subjects: "$KV." + bucket + ".", getSubject: "$JS.API.STREAM.MSG.GET." + stream,
		notices: NoticePrefix + bucket + ".",
	}, nil
}

// validBucket checks a bucket name as JetStream does: letters, digits, '-'
// and '_'.
func validBucket(name string) error {
	ok := name != "" && len(name) <= 255
	for _, c := range name {
		ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-')
	}
	if !ok {
		return fmt.Errorf("natslock: bucket name %q: %w: want 1 to 255 characters of a-z, A-Z, 0-9, _ and -", name, driver.ErrInvalidOption)
	}
	return nil
}

// Name returns "nats".
func (b *Backend) Name() string { return "nats" }

// Conn returns the NATS connection the backend uses.
func (b *Backend) Conn() *nats.Conn { return b.nc }

// Bucket returns the name of the Key-Value bucket the backend keeps its
// locks in.
func (b *Backend) Bucket() string { return b.bucket }

// Close makes every later call fail with an error matching driver.ErrClosed
// and, for a connection Open made, closes it. Calls in progress finish (on
// a connection Open made, with the error of its closing). Closing twice is
// harmless.
func (b *Backend) Close() error {
	if !b.closed.Swap(true) && b.own {
		b.nc.Close()
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

// fail wraps a store error (see driver.Wrap), adding driver.ErrClosed once
// the backend or its connection is closed.
func (b *Backend) fail(err error) error {
	if (b.closed.Load() || b.nc.IsClosed()) && !errors.Is(err, driver.ErrClosed) {
		err = fmt.Errorf("%w: %w", driver.ErrClosed, err)
	}
	return driver.Wrap("natslock", err)
}
