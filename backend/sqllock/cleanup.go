package sqllock

import (
	"context"
	"fmt"
	"time"
)

// Cleanup deletes at most WithCleanupBatch rows that expired (or, on MariaDB
// and MySQL, were released) longer than WithRetention ago, and returns how
// many it deleted. Fences stay increasing: on PostgreSQL they come from a
// sequence, not from the rows; on MariaDB and MySQL the fence floor is
// raised to cover every row before it is deleted.
func (b *Backend) Cleanup(ctx context.Context) (int64, error) {
	var n int64
	for _, q := range b.d.cleanup {
		var err error
		if n, err = b.changed(ctx, q, b.opts.retention.Microseconds(), b.opts.cleanupBatch); err != nil {
			return 0, b.fail(fmt.Errorf("cleanup: %w", err))
		}
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
			n, err := b.Cleanup(b.ctx)
			if err != nil || n < int64(b.opts.cleanupBatch) {
				break
			}
		}
	}
}
