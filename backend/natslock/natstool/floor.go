package natstool

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/natslock"
	"github.com/distlock/distlock/storetool/floor"
)

// natsFloor is the plain Key-Value API's lock: Create with a time to live,
// and Delete on the revision Create returned.
type natsFloor struct {
	conns  []*nats.Conn
	kvs    []jetstream.KeyValue
	tokens []string
	ttl    jetstream.KVCreateOpt
}

// openNATSFloor connects cfg.Clients connections to the URL's servers, read
// by natslock.ParseURL, and opens its bucket through each.
func openNATSFloor(ctx context.Context, u *url.URL, cfg floor.Config) (floor.Target, error) {
	nc, err := natslock.ParseURL(u)
	if err != nil {
		return nil, err
	}
	// Nats-TTL counts whole seconds, at least one: round up, as natslock does.
	ttl := max(time.Second, (cfg.Lease + time.Second - 1).Truncate(time.Second))
	f := &natsFloor{tokens: floor.Tokens(cfg.Workers), ttl: jetstream.KeyTTL(ttl)}
	for range cfg.Clients {
		c, err := natslock.Connect(ctx, nc)
		if err != nil {
			return nil, errors.Join(err, f.Close())
		}
		f.conns = append(f.conns, c)
		js, err := jetstream.New(c)
		if err != nil {
			return nil, errors.Join(err, f.Close())
		}
		kv, err := js.KeyValue(ctx, nc.Bucket)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("bucket %s: %w", nc.Bucket, err), f.Close())
		}
		f.kvs = append(f.kvs, kv)
	}
	return f, nil
}

// Lock creates key if it has no value.
func (f *natsFloor) Lock(ctx context.Context, w int, key string) (func(context.Context) error, error) {
	kv, k := f.kvs[w%len(f.kvs)], natslock.EscapeKey(floor.KeyPrefix+key)
	rev, err := kv.Create(ctx, k, []byte(f.tokens[w]), f.ttl)
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		return nil, distlock.ErrNotAcquired
	case err != nil:
		return nil, fmt.Errorf("create %s: %w", k, err)
	}
	return func(ctx context.Context) error {
		err := kv.Delete(ctx, k, jetstream.LastRevision(rev))
		switch {
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			return fmt.Errorf("delete %s: %w", k, distlock.ErrNotHeld)
		case err != nil:
			return fmt.Errorf("delete %s: %w", k, err)
		}
		return nil
	}, nil
}

// Close closes the connections.
func (f *natsFloor) Close() error {
	for _, c := range f.conns {
		c.Close()
	}
	return nil
}
