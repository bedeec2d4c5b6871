package distlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/distlock/distlock/driver"
)

// WatchPrefix reports, as the store tells of them, the keys under prefix
// whose holder may have changed, until ctx ends or the client closes; the
// channel is closed then. Keys come in batches, each key once in a batch,
// and a batch may name a key whose holder did not change: Inspect tells. An
// empty batch means notices may have been lost: List the prefix again. It
// returns once every change after it will be reported, and an error
// matching errors.ErrUnsupported if the backend's store cannot tell of
// changes (poll with List then).
func (c *Client) WatchPrefix(ctx context.Context, prefix string) (<-chan []string, error) {
	if !validPrefix(prefix) {
		return nil, keyErr("watch", prefix, ErrInvalidKey)
	}
	w, ok := c.backend.(driver.PrefixWatcher)
	if !ok {
		return nil, keyErr("watch", prefix, fmt.Errorf("backend %s: %w", c.backendName, errors.ErrUnsupported))
	}
	ctx, stop := c.untilClosed(ctx)
	ch, err := w.WatchPrefix(ctx, prefix)
	if err != nil {
		stop()
		return nil, keyErr("watch", prefix, err)
	}
	go func() { // the watch ends with ctx, or with Close
		<-ctx.Done()
		stop()
	}()
	return ch, nil
}
