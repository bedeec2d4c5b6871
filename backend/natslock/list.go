package natslock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/distlock/distlock/driver"
)

// errWatchEnded is a List whose watch ended before it read every key.
var errWatchEnded = errors.New("the bucket's watch ended early")

// List returns the held locks whose keys start with prefix, sorted by key:
// the last message of every key of the bucket, through an ordered consumer
// of the bucket's stream (a KV watch), filtered here. Its cost grows with
// the bucket's keys, not with the answer: an escaped key is one subject
// token, which a subject filter cannot match by a prefix. Keys and values
// that natslock did not write are skipped.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	var infos []driver.Info
	err := b.call(ctx, func(ctx context.Context) error {
		kv, err := b.js.KeyValue(ctx, b.bucket)
		if err != nil {
			return err
		}
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return err
		}
		defer func() {
			_ = w.Stop()
			for range w.Updates() { // until the watch's closing: its callback may be sending
			}
		}()
		epre := EscapeKey(prefix)
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case kve, ok := <-w.Updates():
				switch {
				case !ok:
					return errWatchEnded
				case kve == nil: // every key's last message was read
					return nil
				}
				if !strings.HasPrefix(kve.Key(), epre) {
					continue
				}
				key, err := unescapeKey(kve.Key())
				if err != nil {
					continue
				}
				e, err := decodeValue(kve.Revision(), kve.Created(), kve.Value())
				if err != nil {
					continue
				}
				infos = append(infos, e.info(key, time.Now()))
			}
		}
	})
	if err != nil {
		return nil, b.fail(err)
	}
	slices.SortFunc(infos, func(x, y driver.Info) int { return strings.Compare(x.Key, y.Key) })
	return infos, nil
}
