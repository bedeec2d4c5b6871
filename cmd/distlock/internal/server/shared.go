package server

import (
	"context"
	"slices"
	"time"

	"github.com/distlock/distlock"
)

// The dashboard shows the holds of semaphores and read-write locks beside
// the locks. A store's List walks only locks, so the monitor inspects the
// names taken through this server: each AcquirePermit or AcquireRW granted
// records its name (at most maxSharedNames, and maxSharedPerTenant of one
// tenant's, so that no tenant crowds out another's), each poll inspects
// them, and a name found with no holds is forgotten.
const (
	maxSharedNames     = 256
	maxSharedPerTenant = 64
)

// HoldKind is what a held row of the dashboard is.
type HoldKind string

// The kinds of hold the dashboard shows.
const (
	HoldLock   HoldKind = ""       // a lock (a session's too)
	HoldLeader HoldKind = "leader" // an election's term: the lock election/<name>
	HoldPermit HoldKind = "permit" // one of a semaphore's permits
	HoldRead   HoldKind = "read"   // a reader's hold of a read-write lock
	HoldWrite  HoldKind = "write"  // the writer's hold of a read-write lock
)

// sharedName is a semaphore or a read-write lock taken through this server.
type sharedName struct {
	semaphore bool // else a read-write lock
	sk        string
}

// noteShared records that a hold of the semaphore (or read-write lock) sk
// was granted, for the dashboard.
func (m *monitor) noteShared(sk string, semaphore bool) {
	tenant, _, ok := splitStoreKey(sk)
	n := sharedName{semaphore, sk}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, known := m.sharedNames[n]; known || !ok || len(m.sharedNames) >= maxSharedNames ||
		m.sharedPerTenant[tenant] >= maxSharedPerTenant {
		return
	}
	if m.sharedNames == nil {
		m.sharedNames = make(map[sharedName]struct{})
		m.sharedPerTenant = make(map[string]int)
	}
	m.sharedNames[n] = struct{}{}
	m.sharedPerTenant[tenant]++
}

// inspectShared inspects the names noted, at start, and returns their
// holds as the dashboard shows them, and the names found free.
func (m *monitor) inspectShared(ctx context.Context, s *Server, start time.Time) (rows []HeldLock, free []sharedName) {
	m.mu.Lock()
	names := make([]sharedName, 0, len(m.sharedNames))
	for n := range m.sharedNames {
		names = append(names, n)
	}
	m.mu.Unlock()
	for _, n := range names {
		tenant, name, _ := splitStoreKey(n.sk)
		var held []distlock.Info
		kind, permits := HoldPermit, 0
		if n.semaphore {
			sem, err := s.store.of(n.sk).Semaphore(n.sk, 1)
			if err != nil {
				continue
			}
			info, err := sem.Inspect(ctx)
			sem.Close()
			if err != nil {
				continue // the poll's List reports the store's trouble
			}
			held, permits = info.Held, info.Permits
		} else {
			rw, err := s.store.of(n.sk).RWMutex(n.sk)
			if err != nil {
				continue
			}
			info, err := rw.Inspect(ctx)
			rw.Close()
			if err != nil {
				continue
			}
			held, kind = info.Held, HoldRead
			if info.Writer {
				kind = HoldWrite
			}
		}
		if len(held) == 0 {
			free = append(free, n)
		}
		for _, i := range held {
			lease, _ := time.ParseDuration(i.Meta.Labels[labelLease])
			rows = append(rows, HeldLock{
				Tenant: tenant, Key: name, Kind: kind, Permits: permits, Owner: i.Meta.Owner,
				BusinessID: i.Meta.BusinessID, Fence: i.Fence, Since: labelTime(i.Meta.Labels),
				Expires: start.Add(i.TTL), Lease: lease, MaxHold: m.maxHold(n.sk),
			})
		}
	}
	slices.SortFunc(rows, compareHeld)
	return rows, free
}

// setSharedLocked takes a poll's shared rows and forgets the free names;
// it reports whether the rows changed beyond the expiry slack.
func (m *monitor) setSharedLocked(rows []HeldLock, free []sharedName) bool {
	for _, n := range free {
		if _, ok := m.sharedNames[n]; ok {
			delete(m.sharedNames, n)
			tenant, _, _ := splitStoreKey(n.sk)
			if m.sharedPerTenant[tenant]--; m.sharedPerTenant[tenant] <= 0 {
				delete(m.sharedPerTenant, tenant)
			}
		}
	}
	same := slices.EqualFunc(m.shared, rows, func(a, b HeldLock) bool {
		d := a.Expires.Sub(b.Expires)
		return a.Tenant == b.Tenant && a.Key == b.Key && a.Kind == b.Kind && a.Fence == b.Fence &&
			a.Owner == b.Owner && a.Permits == b.Permits && d <= expirySlack && d >= -expirySlack
	})
	if !same {
		m.shared = rows
	}
	return !same
}

// compareHeld orders held rows by tenant, name and fence.
func compareHeld(a, b HeldLock) int {
	if c := cmpPair(a.Tenant, a.Key, b.Tenant, b.Key); c != 0 {
		return c
	}
	return int(min(max(int64(a.Fence)-int64(b.Fence), -1), 1))
}
