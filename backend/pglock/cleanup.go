package pglock

import (
	"context"
	"fmt"

	"github.com/distlock/distlock/driver"
)

// Cleanup deletes at most WithCleanupBatch rows, and returns how many it
// deleted: holder rows whose lease ended more than WithRetention ago and
// whose session no longer holds the lock, then, while the batch allows,
// what read-write locks and semaphores leave likewise (hold and permit rows
// of holds that ended without a release, lapsed intents of writers and of
// requests for permits). Fences stay increasing: they come from the
// sequence, not from the rows.
func (b *Backend) Cleanup(ctx context.Context) (int64, error) {
	if b.holds.Closed() {
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
	var n int64
	for _, q := range []string{cleanupSQL, cleanupRWHoldsSQL, cleanupPermitsSQL, cleanupIntentsSQL, cleanupPermitIntentsSQL} {
		left := int64(b.opts.CleanupBatch) - n
		if left == 0 {
			break
		}
		tag, err := conn.Exec(qctx, q, b.opts.Retention.Milliseconds(), left)
		if err != nil {
			return n, fmt.Errorf("pglock: cleanup: %w", err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}
