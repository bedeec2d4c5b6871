package pglock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkLossNotice is locktest.LossNotice with a forced release that
// ends the holder's session (WithTerminateOnForceRelease): from just before
// it is sent to the holder's Done(), held 20 ms, past the watch delay.
//
//	go test -run '^$' -bench LossNotice -benchtime 100x ./backend/pglock/
func BenchmarkLossNotice(b *testing.B) {
	s := testserver.Postgres(b)
	holder := distlock.New(newBackend(b, newPool(b, s, 8)))
	b.Cleanup(func() { _ = holder.Close() })
	operator := distlock.New(newBackend(b, newPool(b, s, 2), pglock.WithTerminateOnForceRelease(true)))
	b.Cleanup(func() { _ = operator.Close() })
	locktest.LossNotice(b, holder, operator, 20*time.Millisecond)
}
