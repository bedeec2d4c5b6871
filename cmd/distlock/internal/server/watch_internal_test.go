package server

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// The watcher's bookkeeping, step by step on a made-up clock: what a poll
// and a change report, and what they must not report twice.
func TestWatcher(t *testing.T) {
	const root = "tenants/a/p/"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lock := func(key string, fence uint64, ttl time.Duration) distlock.Info {
		return distlock.Info{Key: root + key, Held: true, Fence: fence, TTL: ttl}
	}
	newWatcher := func(held ...distlock.Info) *watcher {
		w := &watcher{root: root, interval: 100 * time.Millisecond, since: at(0),
			seen: make(map[string]sighting), ended: make(map[string]tombstone)}
		w.baseline(held, at(10))
		return w
	}
	type ev struct {
		typ   distlockv1.Event_Type
		key   string
		fence uint64
	}
	check := func(t *testing.T, step string, got []*distlockv1.Event, want ...ev) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d events %v, want %v", step, len(got), got, want)
		}
		for i, e := range got {
			if w := want[i]; e.GetType() != w.typ || e.GetLock().GetKey() != w.key || e.GetLock().GetFence() != w.fence {
				t.Errorf("%s: event %d = %v, want %+v", step, i, e, w)
			}
		}
	}
	const (
		acq    = distlockv1.Event_TYPE_ACQUIRED
		rel    = distlockv1.Event_TYPE_RELEASED
		exp    = distlockv1.Event_TYPE_EXPIRED
		forced = distlockv1.Event_TYPE_FORCE_RELEASED
	)
	minute := time.Minute

	t.Run("baseline is no news", func(t *testing.T) {
		w := newWatcher(lock("a", 1, minute))
		check(t, "poll", w.diff([]distlock.Info{lock("a", 1, minute)}, nil, at(100), at(110)))
	})
	t.Run("a grant after the start is news even if the baseline has it", func(t *testing.T) {
		w := newWatcher(lock("a", 1, minute))
		check(t, "change", w.apply(change{typ: acq, info: lock("a", 1, minute), at: at(5)}, at(20)), ev{acq, "p/a", 1})
		check(t, "poll", w.diff([]distlock.Info{lock("a", 1, minute)}, nil, at(100), at(110)))
	})
	t.Run("a late release does not end the hold a reading found after it", func(t *testing.T) {
		// A releases, B is granted; a reading sees B (no token) before the
		// changes of A's release and B's grant come.
		w := newWatcher(lock("a", 65, minute))
		check(t, "A's grant", w.apply(change{typ: acq, token: "A", info: lock("a", 65, minute), at: at(5)}, at(20)), ev{acq, "p/a", 65})
		check(t, "reading", w.diff([]distlock.Info{lock("a", 66, minute)}, nil, at(100), at(110)), ev{rel, "p/a", 65}, ev{acq, "p/a", 66})
		check(t, "A's late release", w.apply(change{typ: rel, token: "A", info: distlock.Info{Key: root + "a"}, at: at(90)}, at(120)))
		check(t, "B's grant", w.apply(change{typ: acq, token: "B", info: lock("a", 66, minute), at: at(95)}, at(130)))
		check(t, "A's release again", w.apply(change{typ: rel, token: "A", info: distlock.Info{Key: root + "a"}, at: at(90)}, at(140)))
		check(t, "B forced out", w.apply(change{typ: forced, info: lock("a", 66, minute), at: at(150)}, at(151)), ev{forced, "p/a", 66})
	})
	t.Run("a release of a hold a reading found is left to the next reading", func(t *testing.T) {
		w := newWatcher()
		check(t, "reading", w.diff([]distlock.Info{lock("a", 9, minute)}, nil, at(100), at(110)), ev{acq, "p/a", 9})
		check(t, "release by a token never seen", w.apply(change{typ: rel, token: "X", info: distlock.Info{Key: root + "a"}, at: at(120)}, at(121)))
		check(t, "next reading", w.diff(nil, nil, at(200), at(210)), ev{rel, "p/a", 9})
	})
	t.Run("a grant before the start is not", func(t *testing.T) {
		w := newWatcher(lock("a", 1, minute))
		w.since = at(6)
		check(t, "change", w.apply(change{typ: acq, info: lock("a", 1, minute), at: at(5)}, at(20)))
	})
	t.Run("a release is not resurrected by a poll that began before it", func(t *testing.T) {
		w := newWatcher()
		check(t, "grant", w.apply(change{typ: acq, info: lock("a", 7, minute), at: at(20)}, at(21)), ev{acq, "p/a", 7})
		check(t, "release", w.apply(change{typ: rel, info: distlock.Info{Key: root + "a"}, at: at(30)}, at(31)), ev{rel, "p/a", 7})
		check(t, "stale poll", w.diff([]distlock.Info{lock("a", 7, minute)}, nil, at(25), at(40)))
		check(t, "fresh poll", w.diff(nil, nil, at(100), at(110)))
		check(t, "new grant", w.diff([]distlock.Info{lock("a", 8, minute)}, nil, at(200), at(210)), ev{acq, "p/a", 8})
	})
	t.Run("a release of a hold never seen hides it from older polls", func(t *testing.T) {
		w := newWatcher()
		check(t, "release", w.apply(change{typ: rel, info: distlock.Info{Key: root + "a"}, at: at(30)}, at(31)))
		check(t, "stale poll", w.diff([]distlock.Info{lock("a", 3, minute)}, nil, at(25), at(40)))
		check(t, "later poll", w.diff([]distlock.Info{lock("a", 4, minute)}, nil, at(50), at(60)), ev{acq, "p/a", 4})
	})
	t.Run("gone: expired or released by the TTL last seen", func(t *testing.T) {
		w := newWatcher(lock("short", 1, 150*time.Millisecond), lock("long", 2, minute))
		check(t, "poll", w.diff(nil, nil, at(200), at(210)), ev{rel, "p/long", 2}, ev{exp, "p/short", 1})
	})
	t.Run("a new fence ends the old hold first", func(t *testing.T) {
		w := newWatcher(lock("a", 1, 50*time.Millisecond))
		check(t, "poll", w.diff([]distlock.Info{lock("a", 2, minute)}, nil, at(200), at(210)), ev{exp, "p/a", 1}, ev{acq, "p/a", 2})
	})
	t.Run("a grant seen after a poll began is not gone from it", func(t *testing.T) {
		w := newWatcher()
		check(t, "grant", w.apply(change{typ: acq, info: lock("a", 1, minute), at: at(120)}, at(130)), ev{acq, "p/a", 1})
		check(t, "older poll", w.diff(nil, nil, at(100), at(140)))
		check(t, "newer poll", w.diff(nil, nil, at(200), at(210)), ev{rel, "p/a", 1})
	})
	t.Run("forced release", func(t *testing.T) {
		w := newWatcher(lock("a", 5, minute))
		info := lock("a", 5, minute)
		info.Meta.Owner = "stuck"
		got := w.apply(change{typ: forced, info: info, at: at(50)}, at(51))
		check(t, "force", got, ev{forced, "p/a", 5})
		if got[0].GetLock().GetOwner() != "stuck" || got[0].GetLock().GetHeld() {
			t.Errorf("forced release's lock %v, want stuck's hold, no longer held", got[0].GetLock())
		}
		check(t, "stale poll", w.diff([]distlock.Info{lock("a", 5, minute)}, nil, at(40), at(60)))
	})
	t.Run("a key left unread is not gone, and its end stays known", func(t *testing.T) {
		w := newWatcher(lock("a", 5, minute))
		unread := map[string]bool{root + "a": true}
		check(t, "poll leaving a unread", w.diff(nil, unread, at(100), at(110)))
		check(t, "force", w.apply(change{typ: forced, info: lock("a", 5, minute), at: at(120)}, at(121)), ev{forced, "p/a", 5})
		check(t, "a stale poll leaving a unread", w.diff([]distlock.Info{lock("a", 5, minute)}, unread, at(200), at(210)))
		check(t, "a stale reading of a", w.diff([]distlock.Info{lock("a", 5, minute)}, nil, at(110), at(220)))
	})
	t.Run("other prefixes are ignored", func(t *testing.T) {
		w := newWatcher()
		other := distlock.Info{Key: "tenants/a/q/x", Held: true, Fence: 1, TTL: minute}
		check(t, "change", w.apply(change{typ: acq, info: other, at: at(20)}, at(21)))
		check(t, "poll", w.diff([]distlock.Info{other}, nil, at(100), at(110)))
	})
}
