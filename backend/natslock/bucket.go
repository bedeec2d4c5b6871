package natslock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/distlock/distlock/driver"
)

// BucketOptions are how CreateBucket makes a bucket.
type BucketOptions struct {
	// Replicas is how many servers keep the bucket's stream; 0 is 1. Use
	// 3 (or 5) on a cluster: a bucket of one replica is unavailable while
	// its server is down.
	Replicas int
	// Storage is where the servers keep it: jetstream.FileStorage (the
	// zero value), whose locks and fences survive a restart, or
	// jetstream.MemoryStorage, where a restart of every replica forgets
	// every lock and starts fences again from 1.
	Storage jetstream.StorageType
	// MarkerTTL is how long the marker that the server leaves when a
	// hold's time to live runs out stays; 0 is DefaultMarkerTTL.
	MarkerTTL time.Duration
}

// DefaultMarkerTTL is BucketOptions.MarkerTTL's default.
const DefaultMarkerTTL = time.Minute

// CreateBucket makes the Key-Value bucket natslock needs, if there is
// none of that name: one revision kept per key (history 1) and per-key
// time to live on (LimitMarkerTTL, which needs nats-server 2.11 or later).
// An existing bucket is left as it is and checked with CheckBucket.
func CreateBucket(ctx context.Context, js jetstream.JetStream, bucket string, o BucketOptions) error {
	if err := validBucket(bucket); err != nil {
		return err
	}
	if o.MarkerTTL == 0 {
		o.MarkerTTL = DefaultMarkerTTL
	}
	if o.MarkerTTL < time.Second || o.Replicas < 0 {
		return fmt.Errorf("natslock: bucket options %+v: %w: MarkerTTL must be at least 1s, Replicas not negative", o, driver.ErrInvalidOption)
	}
	_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket, Description: "distlock locks", History: 1,
		Replicas: o.Replicas, Storage: o.Storage, LimitMarkerTTL: o.MarkerTTL,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		return CheckBucket(ctx, js, bucket)
	}
	if err != nil {
		return fmt.Errorf("natslock: create bucket %s: %w", bucket, err)
	}
	return nil
}

// CheckBucket reads the configuration of bucket's stream and returns an
// error matching driver.ErrNoSchema if there is no such bucket, or if it
// cannot keep locks: per-key time to live off, roll-ups (with which a
// release purges a key) denied, or a mirror, which takes no writes.
func CheckBucket(ctx context.Context, js jetstream.JetStream, bucket string) error {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w: no bucket %q: create it with natslock.CreateBucket or distlock migrate", driver.ErrNoSchema, bucket)
	}
	if err != nil {
		return fmt.Errorf("natslock: bucket %s: %w", bucket, err)
	}
	c := s.CachedInfo().Config
	switch {
	case !c.AllowMsgTTL:
		return fmt.Errorf("%w: bucket %q has no per-key time to live (made without LimitMarkerTTL): make another with natslock.CreateBucket", driver.ErrNoSchema, bucket)
	case !c.AllowRollup:
		return fmt.Errorf("%w: bucket %q denies roll-ups, with which a release purges its key", driver.ErrNoSchema, bucket)
	case c.Mirror != nil:
		return fmt.Errorf("%w: bucket %q is a mirror, which takes no writes", driver.ErrNoSchema, bucket)
	}
	return nil
}
