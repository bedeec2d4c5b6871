package driver

import "context"

// PrefixWatcher is implemented by backends whose store tells of changes
// under a key prefix as they happen (etcd's watch), so that following many
// keys costs the store no reads while nothing changes.
type PrefixWatcher interface {
	// WatchPrefix reports, from when it returns until ctx ends or the
	// backend closes, the keys under prefix whose holder may have changed:
	// a grant, a release, an expiry, a waiter queueing or leaving. Keys come
	// in batches, each key once in a batch; a batch may name a key whose
	// holder did not change. An empty batch means that notices may have been
	// lost (the store's watch broke, or the receiver fell behind): read the
	// whole prefix again. The channel is closed when the watch ends.
	WatchPrefix(ctx context.Context, prefix string) (<-chan []string, error)
}
