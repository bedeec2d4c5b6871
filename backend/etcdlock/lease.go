package etcdlock

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leasePool hands out per-lock leases. A lease freed by a clean Release has
// no key left on it, so it is kept and reused by the next acquisition with the
// same TTL: a keepalive sent alongside the acquiring transaction refreshes it,
// which takes the raft write of a lease grant off the acquire path. Spare
// leases that were not reused expire by themselves; Close revokes the rest.
type leasePool struct {
	lease clientv3.Lease
	renew *renewer

	mu    sync.Mutex
	spare map[int64][]spare // by TTL in seconds
	n     int
}

type spare struct {
	id        clientv3.LeaseID
	confirmed time.Time
}

// maxSpare bounds the leases a backend keeps for reuse.
const maxSpare = 256

func newLeasePool(cli *clientv3.Client) *leasePool {
	return &leasePool{lease: cli, renew: newRenewer(cli, renewStreams), spare: make(map[int64][]spare)}
}

// ticket is a lease taken for one acquisition.
type ticket struct {
	id  clientv3.LeaseID
	ttl int64 // seconds
	// confirmed is when the last request that confirmed the lease's full TTL
	// was sent: the store keeps the lease at least until confirmed+ttl.
	confirmed time.Time
	reused    bool
	refresh   chan refreshed // the keepalive of a reused lease, until settle
}

type refreshed struct {
	sent time.Time
	err  error
}

// ttlSeconds rounds ttl up to etcd's whole seconds.
func ttlSeconds(ttl time.Duration) int64 {
	return max(1, int64((ttl+time.Second-1)/time.Second))
}

// take returns a lease that outlives ttl from now: a spare one, if it has
// nearly ttl left or else with a keepalive in flight until settle, or, with
// fresh or no spare left, a new grant.
func (p *leasePool) take(ctx context.Context, ttl time.Duration, fresh bool) (*ticket, error) {
	sec := ttlSeconds(ttl)
	if s, ok := p.pop(sec, fresh); ok {
		t := &ticket{id: s.id, ttl: sec, confirmed: s.confirmed, reused: true}
		if time.Until(t.expiry()) >= ttl-ttl/8 {
			return t, nil
		}
		t.refresh = make(chan refreshed, 1)
		go func() {
			sent := time.Now()
			_, err := p.renew.keepAlive(ctx, s.id)
			t.refresh <- refreshed{sent, err}
		}()
		return t, nil
	}
	sent := time.Now()
	resp, err := p.lease.Grant(ctx, sec)
	if err != nil {
		return nil, err
	}
	return &ticket{id: resp.ID, ttl: sec, confirmed: sent}, nil
}

// expiry is the earliest time the store may drop the lease.
func (t *ticket) expiry() time.Time { return t.confirmed.Add(time.Duration(t.ttl) * time.Second) }

// sent is the Grant.Sent of a hold of ttl on this lease: the latest time from
// which the store still keeps the lease for ttl, and not after now. The
// holder's validity counts from it.
func (t *ticket) sent(ttl time.Duration) time.Time {
	s := t.expiry().Add(-ttl)
	if now := time.Now(); s.After(now) {
		return now
	}
	return s
}

// settle waits for a reused lease's keepalive and returns its error.
func (t *ticket) settle() error {
	if t.refresh == nil {
		return nil
	}
	r := <-t.refresh
	t.refresh = nil
	if r.err != nil {
		return r.err
	}
	t.confirmed = r.sent
	return nil
}

// keepAlive confirms the lease for another full TTL.
func (p *leasePool) keepAlive(ctx context.Context, t *ticket) error {
	sent := time.Now()
	if _, err := p.renew.keepAlive(ctx, t.id); err != nil {
		return err
	}
	t.confirmed = sent
	return nil
}

// usable reports whether a lease confirmed at confirmed still has at least
// half of its TTL left.
func usable(confirmed time.Time, sec int64) bool {
	return time.Since(confirmed) < time.Duration(sec)*time.Second/2
}

func (p *leasePool) pop(sec int64, fresh bool) (spare, bool) {
	if fresh {
		return spare{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := p.spare[sec]; len(s) > 0; s = p.spare[sec] {
		last := s[len(s)-1]
		p.spare[sec] = s[:len(s)-1]
		p.n--
		if usable(last.confirmed, sec) {
			return last, true
		}
	}
	return spare{}, false
}

// put keeps a lease that has no key attached for reuse.
func (p *leasePool) put(id clientv3.LeaseID, sec int64, confirmed time.Time) {
	if !usable(confirmed, sec) {
		return // it expires by itself soon
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n >= maxSpare {
		return
	}
	p.spare[sec] = append(p.spare[sec], spare{id, confirmed})
	p.n++
}

// close revokes the spare leases within ctx (those left expire by
// themselves) and ends the renewals.
func (p *leasePool) close(ctx context.Context) {
	defer p.renew.close()
	p.mu.Lock()
	all := p.spare
	p.spare, p.n = make(map[int64][]spare), 0
	p.mu.Unlock()
	for _, ss := range all {
		for _, s := range ss {
			if ctx.Err() != nil {
				return
			}
			_, _ = p.lease.Revoke(ctx, s.id)
		}
	}
}
