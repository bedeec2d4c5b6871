package server

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/election"
)

// The monitor is what the dashboard shows: every tenant's held locks, the
// Acquire calls waiting at this server, their waits over the last minutes,
// and the holds that ended against their holders' will. It learns from two
// sources:
//
//   - the calls made through this server (acquireToken, renewToken,
//     releaseToken and forceRelease wrap the client's calls), at once and
//     with what only this server knows: waits, a forced release's reason, a
//     refused renewal;
//   - a poller that lists every tenant's keys every monitorInterval while a
//     dashboard is open on this server (it starts on the first view and
//     stops monitorIdle after the last, and at Shutdown), and diffs them by
//     (key, fence) as Watch does: a hold gone whose TTL had run out expired.
//
// Everything it keeps is bounded: the held locks are those in the store, the
// wait statistics cover at most maxStatKeys keys over statsWindow, and the
// losses are the last maxLosses.

// labelAcquired is the label in which Acquire records when it began the
// grant, RFC 3339 with nanoseconds: the grant came at that time or, after a
// wait, later. The dashboard's "held for" counts from it.
const labelAcquired = "distlock.acquired"

// Monitor bounds and timings.
const (
	monitorInterval = 500 * time.Millisecond // how often the poller lists the store
	monitorIdle     = 5 * time.Minute        // the poller stops this long after the last view
	monitorTimeout  = 10 * time.Second       // bounds one poll
	statsWindow     = 5 * time.Minute        // the wait statistics' span
	statsBucket     = 10 * time.Second       // their resolution
	statsBuckets    = int(statsWindow / statsBucket)
	maxStatKeys     = 10000 // keys with wait statistics, beyond which new keys are not counted
	maxLosses       = 256   // losses remembered
	// waitedAfter is how long a granted Acquire must have taken to count as
	// one that waited: a grant at the first attempt takes a round trip.
	waitedAfter = 10 * time.Millisecond
	// expirySlack is how far a poll's estimate of a lease's end may move
	// before it counts as a change: the store's TTLs are rounded (etcd's to
	// seconds), and a renewal moves it by much more.
	expirySlack = 1100 * time.Millisecond
)

// monitor is a Server's view of the store for the dashboard. Its zero value
// is ready; all of it is guarded by mu.
type monitor struct {
	maxHold func(storeKey string) time.Duration // the server's, set by New

	mu       sync.Mutex
	running  bool      // a poller runs
	baseline bool      // the next poll is the poller's first: what it finds is no news
	lastView time.Time // when a dashboard last asked
	polled   time.Time // when the last good poll began
	prevPoll time.Time // when the poll before it began
	pollErr  error     // the last poll's failure, nil after a good one

	held    map[string]*tracked // by store key; kept only while the poller runs
	ended   map[string]ending
	waiting map[string]int // store key → Acquire calls waiting at this server
	stats   map[string]*waitStats
	losses  []Loss // oldest first, at most maxLosses

	sharedNames     map[sharedName]struct{} // semaphores and read-write locks to inspect (shared.go)
	sharedPerTenant map[string]int          // how many of sharedNames are each tenant's
	shared          []HeldLock              // their holds, as of the last poll

	changed chan struct{} // closed at the next change
}

// tracked is a hold the monitor knows of.
type tracked struct {
	info    distlock.Info // store key, fence, metadata
	since   time.Time     // the grant came at or after since; zero if unknown
	expires time.Time     // when the store lets it expire unless renewed
	seen    time.Time     // when it was last confirmed held
	failing bool          // a renewal through this server failed, other than as not held
	token   string        // of a grant through this server; "" if only read from the store
	capped  bool          // its lease was cut to its hold cap: it ends there
}

// waitStats are one key's Acquire waits at this server, in buckets of
// statsBucket over statsWindow.
type waitStats struct {
	buckets [statsBuckets]waitBucket
}

type waitBucket struct {
	slot           int64 // unix time / statsBucket: which bucket this is
	waited, gaveUp int
	total, max     time.Duration
}

func (m *monitor) initLocked() {
	if m.held == nil {
		m.held = make(map[string]*tracked)
		m.ended = make(map[string]ending)
		m.waiting = make(map[string]int)
		m.stats = make(map[string]*waitStats)
		m.changed = make(chan struct{})
	}
}

// bumpLocked tells the views waiting for a change.
func (m *monitor) bumpLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// touch records a view and starts the poller if it is not running.
func (m *monitor) touch(s *Server) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.initLocked()
	m.lastView = time.Now()
	if !m.running && s.stopCtx.Err() == nil {
		m.running, m.baseline = true, true
		go m.run(s)
	}
	return m.changed
}

// run is the poller: it polls every monitorInterval until Shutdown, or
// until no view came for monitorIdle. Then it forgets the held locks,
// which it can no longer keep current.
func (m *monitor) run(s *Server) {
	tick := time.NewTicker(monitorInterval)
	defer tick.Stop()
	for {
		m.poll(s)
		select {
		case <-s.stopCtx.Done():
		case <-tick.C:
			m.mu.Lock()
			idle := time.Since(m.lastView) > monitorIdle
			m.mu.Unlock()
			if !idle {
				continue
			}
		}
		m.mu.Lock()
		m.running = false
		clear(m.held)
		m.shared = nil
		clear(m.ended)
		m.polled, m.prevPoll = time.Time{}, time.Time{}
		m.bumpLocked()
		m.mu.Unlock()
		return
	}
}

// poll lists every tenant's keys and diffs them with what the monitor knew.
func (m *monitor) poll(s *Server) {
	ctx, cancel := context.WithTimeout(s.stopCtx, monitorTimeout)
	defer cancel()
	start := time.Now()
	infos, err := s.store.List(ctx, tenantsRoot)
	var sharedRows []HeldLock
	var free []sharedName
	if err == nil {
		sharedRows, free = m.inspectShared(ctx, s, start)
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if s.stopCtx.Err() == nil && (m.pollErr == nil || m.pollErr.Error() != err.Error()) {
			m.pollErr = err
			m.bumpLocked()
		}
		return
	}
	changed := m.pollErr != nil || m.polled.IsZero() // the first poll makes the view current
	changed = m.setSharedLocked(sharedRows, free) || changed
	m.pollErr = nil
	baseline := m.baseline
	m.baseline = false
	present := make(map[string]bool, len(infos))
	for _, i := range infos {
		sk := i.Key
		if _, _, ok := splitStoreKey(sk); !ok || !i.Held {
			continue
		}
		present[sk] = true
		if t, ok := m.ended[sk]; ok && (i.Fence <= t.fence || (t.fence == 0 && start.Before(t.at))) {
			continue // a hold whose end this server made
		}
		expires := start.Add(i.TTL)
		t := m.held[sk]
		if t != nil && t.info.Fence == i.Fence {
			if d := expires.Sub(t.expires); d > expirySlack || d < -expirySlack {
				t.expires = expires
				changed = true
			}
			if !maps.Equal(t.info.Meta.Labels, i.Meta.Labels) || t.info.Meta.Owner != i.Meta.Owner {
				t.info.Meta = i.Meta
				changed = true
			}
			t.seen = start
			continue
		}
		if t != nil && t.info.Fence > i.Fence {
			continue // this server granted a newer hold after the poll began
		}
		if t != nil {
			m.endLocked(sk, t, now)
		}
		since := labelTime(i.Meta.Labels)
		if !baseline && !m.polled.IsZero() && m.polled.After(since) {
			since = m.polled // it was not there when the last poll began
		}
		m.held[sk] = &tracked{info: i, since: since, expires: expires, seen: start}
		changed = true
	}
	for sk, t := range m.held {
		if !present[sk] && t.seen.Before(start) { // a hold seen after start may be newer than the poll
			if baseline {
				delete(m.held, sk)
			} else {
				m.endLocked(sk, t, now)
			}
			changed = true
		}
	}
	for sk, t := range m.ended {
		if t.at.Before(start) { // every later poll begins after these ends
			delete(m.ended, sk)
		}
	}
	m.prevPoll, m.polled = m.polled, start
	m.pruneStatsLocked(now)
	if changed {
		m.bumpLocked()
	}
}

// endLocked forgets a hold found gone or replaced, and records it as
// expired if its lease had run out by now, give or take a poll.
func (m *monitor) endLocked(sk string, t *tracked, now time.Time) {
	delete(m.held, sk)
	switch {
	case t.expires.After(now.Add(monitorInterval)):
	case t.capped:
		m.lossLocked(LossMaxHold, sk, t.info, now, "held to its max hold of "+m.maxHold(sk).String(), "")
	default:
		m.lossLocked(LossExpired, sk, t.info, now, "", "")
	}
}

// lossLocked records a loss.
func (m *monitor) lossLocked(kind LossKind, sk string, info distlock.Info, at time.Time, reason, by string) {
	tenant, key, _ := splitStoreKey(sk)
	if len(m.losses) == maxLosses {
		m.losses = slices.Delete(m.losses, 0, 1)
	}
	m.losses = append(m.losses, Loss{
		Kind: kind, Tenant: tenant, Key: key, Owner: info.Meta.Owner, BusinessID: info.Meta.BusinessID,
		Fence: info.Fence, At: at, Reason: reason, By: by,
	})
	m.bumpLocked()
}

// labelTime is the time in a lock's labelAcquired label, or zero.
func labelTime(labels map[string]string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, labels[labelAcquired])
	if err != nil {
		return time.Time{}
	}
	return t
}

// acquireToken is the store's AcquireToken as Acquire makes it, stamped with
// labelAcquired (added after opts, so it joins the labels they set) and
// told to the monitor: the wait, its outcome, and the grant. It returns the
// labels the lock got.
func (s *Server) acquireToken(ctx context.Context, sk, token string, opts ...distlock.Option) (distlock.TokenGrant, map[string]string, error) {
	var r distlock.Request
	for _, o := range opts {
		o(&r)
	}
	labels := maps.Clone(r.Meta.Labels)
	if labels == nil {
		labels = make(map[string]string, 1)
	}
	start := time.Now()
	labels[labelAcquired] = start.UTC().Format(time.RFC3339Nano)
	opts = append(opts[:len(opts):len(opts)], distlock.WithMetadata(labels))
	m := &s.mon
	if r.Wait != 0 {
		m.addWaiting(sk, 1)
	}
	g, err := s.store.of(sk).AcquireToken(ctx, sk, token, opts...)
	end := time.Now()

	m.mu.Lock()
	defer m.mu.Unlock()
	m.initLocked()
	if r.Wait != 0 {
		m.waitingLocked(sk, -1)
	}
	// Only calls that asked to wait (or to wait until ctx ends) count: a try that finds the key held
	// may be an Acquire's first try before its wait (see Acquire).
	elapsed := end.Sub(start)
	switch {
	case r.Wait != 0 && errors.Is(err, distlock.ErrNotAcquired):
		m.countLocked(sk, end, elapsed, true)
	case r.Wait != 0 && err == nil && elapsed > waitedAfter:
		m.countLocked(sk, end, elapsed, false)
	}
	if err != nil || !m.running {
		return g, labels, err
	}
	if t, ok := m.ended[sk]; ok && t.fence >= g.Fence {
		return g, labels, err
	}
	if old := m.held[sk]; old != nil {
		if old.info.Fence == g.Fence && old.token == "" {
			// A read after the store's notice of this very grant came
			// first: the hold is this token's, which an earlier hold's
			// release must not end (releaseToken).
			old.token = token
		}
		if old.info.Fence >= g.Fence {
			return g, labels, err
		}
		m.endLocked(sk, old, end)
	}
	since := start
	if g.Sent.After(since) && g.Sent.Before(end) {
		since = g.Sent
	}
	ttl := g.Lease + g.LockDelay
	m.held[sk] = &tracked{
		info: distlock.Info{Key: sk, Held: true, Fence: g.Fence, TTL: ttl,
			Meta: distlock.Meta{Owner: r.Meta.Owner, BusinessID: r.Meta.BusinessID, Labels: labels}},
		since: since, expires: g.Sent.Add(ttl), seen: end, token: token,
	}
	m.bumpLocked()
	return g, labels, err
}

// addWaiting counts an Acquire that begins (delta 1) or ends (-1) a wait.
func (m *monitor) addWaiting(sk string, delta int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.initLocked()
	m.waitingLocked(sk, delta)
}

func (m *monitor) waitingLocked(sk string, delta int) {
	if n := m.waiting[sk] + delta; n > 0 {
		m.waiting[sk] = n
	} else {
		delete(m.waiting, sk)
	}
	m.bumpLocked()
}

// countLocked adds an Acquire of sk that asked to wait and ended at end
// after d: with the key, or having given up without it.
func (m *monitor) countLocked(sk string, end time.Time, d time.Duration, gaveUp bool) {
	st := m.stats[sk]
	if st == nil {
		if len(m.stats) >= maxStatKeys {
			m.pruneStatsLocked(end)
		}
		if len(m.stats) >= maxStatKeys {
			return
		}
		st = &waitStats{}
		m.stats[sk] = st
	}
	slot := end.UnixNano() / int64(statsBucket)
	b := &st.buckets[slot%int64(statsBuckets)]
	if b.slot != slot {
		*b = waitBucket{slot: slot}
	}
	if gaveUp {
		b.gaveUp++
	}
	if d > waitedAfter {
		b.waited++
		b.total += d
		b.max = max(b.max, d)
	}
	m.bumpLocked()
}

// sum adds up the buckets within statsWindow of now.
func (st *waitStats) sum(now time.Time) (b waitBucket) {
	oldest := now.Add(-statsWindow).UnixNano() / int64(statsBucket)
	for _, x := range st.buckets {
		if x.slot <= oldest {
			continue
		}
		b.waited += x.waited
		b.gaveUp += x.gaveUp
		b.total += x.total
		b.max = max(b.max, x.max)
	}
	return b
}

// pruneStatsLocked drops the statistics of keys with nothing in the window.
func (m *monitor) pruneStatsLocked(now time.Time) {
	for sk, st := range m.stats {
		if b := st.sum(now); b.waited == 0 && b.gaveUp == 0 {
			delete(m.stats, sk)
		}
	}
}

// renewToken is the store's RenewToken, told to the monitor: a renewal
// refused (the token no longer holds the key) is a loss; one that failed
// otherwise marks the hold as failing until one succeeds.
func (s *Server) renewToken(ctx context.Context, sk, token string, lease time.Duration) error {
	sent := time.Now()
	err := s.store.of(sk).RenewToken(ctx, sk, token, lease)
	m := &s.mon
	m.mu.Lock()
	defer m.mu.Unlock()
	m.initLocked()
	t := m.held[sk]
	switch {
	case err == nil:
		if t != nil {
			t.expires, t.failing, t.seen = sent.Add(lease), false, time.Now()
			m.bumpLocked()
		}
	case errors.Is(err, distlock.ErrNotHeld):
		// Not the current holder's token (that one would renew): the
		// renewer lost its hold. Its owner is unknown here.
		m.lossLocked(LossRenewRefused, sk, distlock.Info{}, time.Now(), renewRefusedReason, "")
	case ctx.Err() == nil && t != nil && !t.failing:
		t.failing = true
		m.bumpLocked()
	}
	return err
}

// renewRefusedReason is the reason of a refused renewal's loss.
const renewRefusedReason = "not held: the lease ran out, or the lock was released or force-released"

// renewRefused tells the monitor of a renewal of sk refused before any
// renewal was tried (the key was found free), and returns
// distlock.ErrNotHeld.
func (s *Server) renewRefused(sk string) error {
	m := &s.mon
	m.mu.Lock()
	defer m.mu.Unlock()
	m.initLocked()
	m.lossLocked(LossRenewRefused, sk, distlock.Info{}, time.Now(), renewRefusedReason, "")
	return distlock.ErrNotHeld
}

// releaseToken is the store's ReleaseToken, told to the monitor.
func (s *Server) releaseToken(ctx context.Context, sk, token string) error {
	err := s.store.of(sk).ReleaseToken(ctx, sk, token)
	if err != nil {
		return err
	}
	m := &s.mon
	m.mu.Lock()
	defer m.mu.Unlock()
	m.initLocked()
	var fence uint64
	if t := m.held[sk]; t != nil {
		if t.token != "" && t.token != token {
			return nil // a later grant (to a waiter) came first, and ended this hold in the view
		}
		fence = t.info.Fence
		delete(m.held, sk)
		m.bumpLocked()
	}
	if m.running {
		m.buryLocked(sk, fence, time.Now())
	}
	return nil
}

// forceRelease is the store's ForceRelease, told to the monitor with its
// reason and the tenant of the admin who asked (ctx is a call's).
func (s *Server) forceRelease(ctx context.Context, sk, reason string) (distlock.Info, error) {
	info, err := s.store.of(sk).ForceRelease(ctx, sk, reason)
	if err != nil {
		return info, err
	}
	now := time.Now()
	m := &s.mon
	m.mu.Lock()
	defer m.mu.Unlock()
	m.initLocked()
	shown := info
	if t := m.held[sk]; t != nil {
		if shown.Meta.Owner == "" && shown.Meta.BusinessID == "" {
			shown.Meta = t.info.Meta
		}
		if shown.Fence == 0 {
			shown.Fence = t.info.Fence
		}
		delete(m.held, sk)
	}
	if m.running {
		m.buryLocked(sk, shown.Fence, now)
	}
	by := ""
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		by = c.id.Tenant
	}
	m.lossLocked(LossForced, sk, shown, now, reason, by)
	return info, nil
}

// buryLocked records that sk's holds up to fence ended through this server
// at at, so that a poll begun before does not report them.
func (m *monitor) buryLocked(sk string, fence uint64, at time.Time) {
	if t, ok := m.ended[sk]; ok && t.fence > fence {
		fence = t.fence
	}
	m.ended[sk] = ending{fence: fence, at: at}
}

// ending is the end, through this server, of a key's holds up to a fence
// (0: of a hold the monitor did not know) at a time.
type ending struct {
	fence uint64
	at    time.Time
}

// viewLocked is the monitor's state as id may see it, under prefix.
func (m *monitor) viewLocked(tenant string, all bool, prefix string, now time.Time) View {
	v := View{Tenant: tenant, AllTenants: all, Polled: m.polled, PollErr: m.pollErr, Live: m.running}
	visible := func(sk string) (string, string, bool) {
		t, key, ok := splitStoreKey(sk)
		if !ok || (!all && t != tenant) {
			return "", "", false
		}
		return t, key, matchPrefix(prefix, t, key, all)
	}
	for sk, t := range m.held {
		tn, key, ok := visible(sk)
		if !ok {
			continue
		}
		lease, _ := time.ParseDuration(t.info.Meta.Labels[labelLease])
		kind, value := HoldLock, ""
		if v, ok := t.info.Meta.Labels[election.ValueLabel]; ok && strings.HasPrefix(key, election.KeyPrefix) {
			kind, value = HoldLeader, v
		}
		v.Locks = append(v.Locks, HeldLock{
			Tenant: tn, Key: key, Kind: kind, Value: value, Owner: t.info.Meta.Owner, BusinessID: t.info.Meta.BusinessID,
			Fence: t.info.Fence, Since: t.since, Expires: t.expires, Lease: lease,
			Waiters: m.waiting[sk], RenewFailing: t.failing, Session: t.info.Meta.Labels[labelSession] != "",
			MaxHold: m.maxHold(sk),
		})
	}
	for _, l := range m.shared {
		if _, _, ok := visible(storeKey(l.Tenant, l.Key)); ok {
			v.Locks = append(v.Locks, l)
		}
	}
	slices.SortFunc(v.Locks, compareHeld)
	if len(v.Locks) > MaxViewLocks {
		v.More = len(v.Locks) - MaxViewLocks
		v.Locks = v.Locks[:MaxViewLocks]
	}
	keys := make(map[string]bool, len(m.waiting)+len(m.stats))
	for sk := range m.waiting {
		keys[sk] = true
	}
	for sk := range m.stats {
		keys[sk] = true
	}
	for sk := range keys {
		tn, key, ok := visible(sk)
		if !ok {
			continue
		}
		c := Contention{Tenant: tn, Key: key, Waiters: m.waiting[sk]}
		if st := m.stats[sk]; st != nil {
			b := st.sum(now)
			c.Waited, c.GaveUp, c.TotalWait, c.MaxWait = b.waited, b.gaveUp, b.total, b.max
		}
		if c.Waiters > 0 || c.Waited > 0 || c.GaveUp > 0 {
			v.Contended = append(v.Contended, c)
		}
	}
	slices.SortFunc(v.Contended, func(a, b Contention) int {
		switch {
		case a.Waiters != b.Waiters:
			return b.Waiters - a.Waiters
		case a.TotalWait != b.TotalWait:
			return int(b.TotalWait - a.TotalWait)
		case a.Waited != b.Waited:
			return b.Waited - a.Waited
		}
		return cmpPair(a.Tenant, a.Key, b.Tenant, b.Key)
	})
	if len(v.Contended) > MaxViewContended {
		v.Contended = v.Contended[:MaxViewContended]
	}
	for i := len(m.losses) - 1; i >= 0 && len(v.Losses) < MaxViewLosses; i-- {
		l := m.losses[i]
		if _, _, ok := visible(storeKey(l.Tenant, l.Key)); ok {
			v.Losses = append(v.Losses, l)
		}
	}
	return v
}

// matchPrefix reports whether a key of tenant is under a view's prefix: the
// key's, or for a view of every tenant "tenant/key"'s too.
func matchPrefix(prefix, tenant, key string, all bool) bool {
	return strings.HasPrefix(key, prefix) || (all && strings.HasPrefix(tenant+"/"+key, prefix))
}

func cmpPair(a1, a2, b1, b2 string) int {
	if c := strings.Compare(a1, b1); c != 0 {
		return c
	}
	return strings.Compare(a2, b2)
}
