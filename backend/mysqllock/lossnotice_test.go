package mysqllock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/mysqllock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkLossNotice is locktest.LossNotice with a forced release that
// kills the holder's session (WithKillOnForceRelease): from just before it
// is sent to the holder's Done(), held 20 ms.
//
//	go test -run '^$' -bench LossNotice -benchtime 100x ./backend/mysqllock/
func BenchmarkLossNotice(b *testing.B) {
	s := testserver.MariaDB(b)
	holder := distlock.New(newBackend(b, openDB(b, s, 8)))
	operator := distlock.New(newBackend(b, openDB(b, s, 2), mysqllock.WithKillOnForceRelease(true)))
	locktest.LossNotice(b, holder, operator, 20*time.Millisecond)
}
