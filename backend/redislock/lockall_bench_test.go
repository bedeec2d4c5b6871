package redislock_test

import (
	"testing"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkLockAll is Client.LockAll and Release of sets of 2, 4 and 8
// keys, one caller, each set in one script and key by key, against
// Lock+Release of one key (locktest.BenchLockAll).
//
//	go test -run '^$' -bench LockAll -count 3 ./backend/redislock/
func BenchmarkLockAll(b *testing.B) {
	s := testserver.Redis(b)
	locktest.BenchLockAll(b, func(t testing.TB) driver.Backend { return openURL(t, "redis://"+s.Addr()) })
}
