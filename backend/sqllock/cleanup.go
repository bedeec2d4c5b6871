package sqllock

import (
	"context"
	"fmt"
	"time"
)

// Cleanup deletes at most WithCleanupBatch rows that expired longer than
// WithRetention ago, and returns how many it deleted. Fences stay increasing:
// they come from a sequence, not from the rows.
func (b *Backend) Cleanup(ctx context.Context) (int64, error) {
	n, err := b.exec(ctx, b.d.cleanup, b.opts.retention.Microseconds(), b.opts.cleanupBatch)
	if err != nil {
		return 0, fmt.Errorf("sqllock: cleanup: %w", err)
	}
	return n, nil
}

// cleanupLoop runs Cleanup every interval until Close; a full batch runs the
// next one at once, at most 100 in a row.
func (b *Backend) cleanupLoop() {
	defer b.wg.Done()
	t := time.NewTicker(b.opts.cleanupEvery)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		for range 100 {
			ctx, cancel := context.WithTimeout(b.ctx, b.opts.cleanupEvery)
			n, err := b.Cleanup(ctx)
			cancel()
			if err != nil || n < int64(b.opts.cleanupBatch) {
				break
			}
		}
	}
}
