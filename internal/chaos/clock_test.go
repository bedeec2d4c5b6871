//go:build chaos

package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testserver"
)

// Clock faults move the wall clock of the store process (never the
// clients', never the monotonic clocks) through testserver.FakeClock,
// which runs the store under libfaketime. They apply to the stores that
// time leases by their own wall clock: Redis (key expiry; TIME, the floor
// of every fence), and so each Redlock node, MariaDB for the lease table (UTC_TIMESTAMP(6) in every
// statement), and dynalite, where dynamolock reads no store clock at all,
// which the rows confirm. etcd is a Go program: it reads the clock through
// the vDSO, past libfaketime, so it has no clock row (its leases run on
// the leader's monotonic clock anyway). pglock and mysqllock hold session
// locks that no clock ends.

// clocked deploys a store whose processes start under a fake clock that
// the scenario's fault moves: deploy starts them with on.
func clocked(deploy func(t *testing.T, on testing.TB) *deployment) func(*testing.T) *deployment {
	return func(t *testing.T) *deployment {
		c := testserver.NewFakeClock(t)
		d := deploy(t, c.On(t))
		d.clock = c
		return d
	}
}

func redisOn(_ *testing.T, on testing.TB) *deployment {
	return single(testserver.Redis(on), redisURL)
}

func sqlLockClocked(t *testing.T, on testing.TB) *deployment {
	return sqlLockOn(t, testserver.MariaDB(on, durableMariaDB))
}

func dynamoClocked(t *testing.T, on testing.TB) *deployment {
	return dynamoOn(t, testserver.Dynalite(on))
}

// redlockClocked runs Redlock's five nodes, the first k of them under the
// fake clock: a clock fault moves those k together.
func redlockClocked(k int) func(*testing.T, testing.TB) *deployment {
	return func(t *testing.T, on testing.TB) *deployment {
		var servers []*testserver.Server
		var addrs []string
		for i := range 5 {
			tb := testing.TB(t)
			if i < k {
				tb = on
			}
			s := testserver.Redis(tb)
			servers = append(servers, s)
			addrs = append(addrs, s.Addr())
		}
		u := "redlock://" + strings.Join(addrs, ",")
		return &deployment{url: func(string) string { return u }, servers: servers}
	}
}

// clockStep steps the store's clock by step leases (back if negative),
// three times, a lease apart, each while a holder is inside: the offsets
// add up (+2s, +4s, +6s for 2). A step forward past a lease ends every lease in the
// store at once; a step back makes them last longer.
func clockStep(step int) func(*testing.T, *run) {
	return func(t *testing.T, r *run) {
		offset := 0
		r.repeat(3, func() {
			if r.occupant() < 0 {
				return
			}
			offset += step
			if err := r.dep.clock.Set(lease * time.Duration(offset)); err != nil {
				t.Error(err)
			}
		})
	}
}

// clockRate makes the store's clock run rate times as fast from the moment
// a holder is inside until the end of the run, without a step.
func clockRate(rate float64) func(*testing.T, *run) {
	return func(t *testing.T, r *run) {
		if r.occupant() < 0 {
			return
		}
		if err := r.dep.clock.SetRate(rate); err != nil {
			t.Error(err)
		}
	}
}

// clockBackRestart steps the store's clock two leases back while a holder
// is inside, then kills the store and starts it again half a lease later,
// empty (no persistence), twice: the fence counter is lost while the
// clock, which a lost counter falls back to, is behind the fences already
// granted.
func clockBackRestart(t *testing.T, r *run) {
	offset := 0
	r.repeat(2, func() {
		if r.occupant() < 0 {
			return
		}
		offset -= 2
		if err := r.dep.clock.Set(lease * time.Duration(offset)); err != nil {
			t.Error(err)
			return
		}
		r.hold(lease / 2)
		for _, s := range r.dep.servers {
			s.Kill()
		}
		r.hold(lease / 2)
		for _, s := range r.dep.servers {
			s.Start()
		}
	})
}
