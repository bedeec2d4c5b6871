package pglock

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
)

// Cleanup deletes at most WithCleanupBatch holder rows whose lease ended
// more than WithRetention ago and whose session no longer holds the lock, and
// returns how many it deleted. Fences stay increasing: they come from the
// sequence, not from the rows.
func (b *Backend) Cleanup(ctx context.Context) (int64, error) {
	if b.closed.Load() {
		return 0, fmt.Errorf("pglock: cleanup: %w", driver.ErrClosed)
	}
	if err := b.ensureSchema(ctx); err != nil {
		return 0, fmt.Errorf("pglock: cleanup: %w", err)
	}
	conn, qctx, done, err := b.pooled(ctx)
	if err != nil {
		return 0, fmt.Errorf("pglock: cleanup: %w", err)
	}
	defer done()
	tag, err := conn.Exec(qctx, cleanupSQL, b.opts.retention.Milliseconds(), b.opts.cleanupBatch)
	if err != nil {
		return 0, fmt.Errorf("pglock: cleanup: %w", err)
	}
	return tag.RowsAffected(), nil
}

// cleanupLoop runs Cleanup every interval until ctx ends; a full batch runs
// the next one at once, at most 100 in a row.
func (b *Backend) cleanupLoop(ctx context.Context) {
	defer b.wg.Done()
	t := time.NewTicker(b.opts.cleanupEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for range 100 {
			cctx, cancel := context.WithTimeout(ctx, b.opts.cleanupEvery)
			n, err := b.Cleanup(cctx)
			cancel()
			if err != nil || n < int64(b.opts.cleanupBatch) {
				break
			}
		}
	}
}
