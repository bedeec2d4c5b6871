// Package keyfeed hands the keys a store's watch names to a receiver in
// batches, as driver.PrefixWatcher promises: each key once in a batch, and
// an empty batch once keys may have been lost (the watch broke, or more
// piled up than the feed keeps), which tells the receiver to read the whole
// prefix again.
package keyfeed

import "time"

// Feed keeps the keys its receiver has not taken yet. Its zero value keeps
// none; a Feed is used by one goroutine.
type Feed struct {
	max     int
	pending map[string]struct{}
	resync  bool
}

// New returns a feed that keeps at most max keys; past that it drops them
// and owes its receiver an empty batch.
func New(max int) *Feed {
	return &Feed{max: max, pending: make(map[string]struct{})}
}

// Add keeps key for the next batch.
func (f *Feed) Add(key string) {
	if f.resync {
		return
	}
	f.pending[key] = struct{}{}
	if len(f.pending) > f.max {
		f.Lost()
	}
}

// Lost drops the keys kept: changes may have been missed, and the next
// batch is empty.
func (f *Feed) Lost() {
	clear(f.pending)
	f.resync = true
}

// Next returns out and the batch to send on it, or a nil channel (which
// blocks a select for ever) if there is nothing to send. Call Sent once the
// batch was sent.
func (f *Feed) Next(out chan<- []string) (chan<- []string, []string) {
	switch {
	case f.resync:
		return out, nil
	case len(f.pending) == 0:
		return nil, nil
	}
	batch := make([]string, 0, len(f.pending))
	for k := range f.pending {
		batch = append(batch, k)
	}
	return out, batch
}

// Sent forgets what the last batch from Next carried.
func (f *Feed) Sent() {
	clear(f.pending)
	f.resync = false
}

// NextRetry returns the pause before the next attempt to open a broken
// watch again, after a pause of last (0 before the first): doubling from
// 50ms up to 2s.
func NextRetry(last time.Duration) time.Duration {
	return min(max(2*last, 50*time.Millisecond), 2*time.Second)
}
