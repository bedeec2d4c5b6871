package natstool

import (
	"context"
	"fmt"
	"net/url"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/distlock/distlock/backend/natslock"
)

// migrateNATS is the migration of a nats:// URL, read by natslock's
// ParseURL: natslock.CreateBucket of its bucket, with one replica and file
// storage (make a replicated bucket with natslock.CreateBucket).
func migrateNATS(ctx context.Context, u *url.URL) (string, error) {
	cfg, err := natslock.ParseURL(u)
	if err != nil {
		return "", err
	}
	nc, err := natslock.Connect(ctx, cfg)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	if err := natslock.CreateBucket(ctx, js, cfg.Bucket, natslock.BucketOptions{}); err != nil {
		return "", err
	}
	return fmt.Sprintf("the Key-Value bucket %s, with per-key time to live", cfg.Bucket), nil
}
