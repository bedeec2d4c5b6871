package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock"
)

// polls shares one reading of a tenant's namespace among all its Watch
// streams, whatever their number or prefixes. Where the store tells of
// changes (distlock.Client.WatchPrefix, of every store), each notice is one Inspect of each
// key it names, at most once per minReadingGap, and an idle namespace costs
// no read; elsewhere, every
// Limits.WatchInterval one List of the tenant's keys, sorted once. A poll
// per stream made the store's and the server's work grow with the streams
// (20 streams of one tenant at 1 000 keys kept two cores busy).
type polls struct {
	store    *stores
	interval time.Duration
	stopCtx  context.Context // Shutdown ends every loop

	mu       sync.Mutex
	byTenant map[string]*tenantPolls
	busy     map[string]int // store keys with a change of this server in flight
	readings map[*tracking]struct{}
}

// tracking is a reading under way of a namespace, and the keys of it that
// this server changed meanwhile (or was changing as it began).
type tracking struct {
	ns   string
	keys map[string]bool
}

// tenantPolls is the loop of one tenant and the streams it feeds.
type tenantPolls struct {
	subs map[*pollFeed]struct{}
	stop context.CancelFunc
	// Keys a notice named while this server changed them, to read once
	// the change's event is out, and the loop's signal that there are.
	again map[string]struct{}
	wake  chan struct{}
}

// maxQueuedReads bounds the readings a stream has not taken yet. A stream
// that falls further behind drops them and reads the namespace itself.
const maxQueuedReads = 64

// pollFeed is one stream's feed of readings, in order.
type pollFeed struct {
	ready chan struct{} // a reading is queued

	mu     sync.Mutex
	queue  []pollResult
	behind bool // the queue overflowed: the stream must read everything
}

// pollResult is one reading of a tenant's keys, begun at start: a poll of
// every key (keys is nil) but those unread, or, from a notice, the keys it
// names (keys, sorted), of which infos are the held. infos is sorted by
// key, shared by every stream and must not be changed.
type pollResult struct {
	keys   []string
	infos  []distlock.Info
	unread map[string]bool
	start  time.Time
	err    error
}

// put queues r for the stream.
func (f *pollFeed) put(r pollResult) {
	f.mu.Lock()
	if len(f.queue) < maxQueuedReads {
		f.queue = append(f.queue, r)
	} else {
		f.queue, f.behind = nil, true
	}
	f.mu.Unlock()
	select {
	case f.ready <- struct{}{}:
	default:
	}
}

// take returns the queued readings, in order, and whether the stream fell
// behind and must read the namespace itself first.
func (f *pollFeed) take() ([]pollResult, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, behind := f.queue, f.behind
	f.queue, f.behind = nil, false
	return q, behind
}

// subscribe returns a feed of tenant's readings, starting its loop if it is
// the first; end it with unsubscribe.
func (p *polls) subscribe(tenant string) *pollFeed {
	f := &pollFeed{ready: make(chan struct{}, 1)}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.byTenant[tenant]
	if t == nil {
		if p.byTenant == nil {
			p.byTenant = make(map[string]*tenantPolls)
		}
		ctx, stop := context.WithCancel(p.stopCtx)
		t = &tenantPolls{subs: make(map[*pollFeed]struct{}), stop: stop,
			again: make(map[string]struct{}), wake: make(chan struct{}, 1)}
		p.byTenant[tenant] = t
		go p.loop(ctx, tenant, t)
	}
	t.subs[f] = struct{}{}
	return f
}

// unsubscribe ends f, and tenant's loop with its last feed.
func (p *polls) unsubscribe(tenant string, f *pollFeed) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.byTenant[tenant]
	delete(t.subs, f)
	if len(t.subs) == 0 {
		t.stop()
		delete(p.byTenant, tenant)
	}
}

// local marks sk, a key of tenant, as being changed by this server until
// done is called, after the change's event is published. A notice of sk
// read in between could report the change before that event, which says
// what it was (a forced release, where the store shows only a key gone):
// such a notice is read once done is called instead.
func (p *polls) local(tenant, sk string) (done func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy == nil {
		p.busy = make(map[string]int)
	}
	p.busy[sk]++
	for tr := range p.readings {
		if strings.HasPrefix(sk, tr.ns) {
			tr.keys[sk] = true
		}
	}
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.busy[sk]--; p.busy[sk] > 0 {
			return
		}
		delete(p.busy, sk)
		if t := p.byTenant[tenant]; t != nil {
			if _, ok := t.again[sk]; ok {
				select {
				case t.wake <- struct{}{}:
				default:
				}
			}
		}
	}
}

// reading calls read, a reading of tenant's keys, and returns those keys
// this server changed while it was under way, or was changing as it began
// (nil if none). What it found of them may show a change before the
// change's event is out: the caller leaves them unread, and they are read
// again once their changes are over.
func (p *polls) reading(tenant string, read func()) (unread map[string]bool) {
	tr := &tracking{ns: namespace(tenant), keys: make(map[string]bool)}
	p.mu.Lock()
	for k := range p.busy {
		if strings.HasPrefix(k, tr.ns) {
			tr.keys[k] = true
		}
	}
	if p.readings == nil {
		p.readings = make(map[*tracking]struct{})
	}
	p.readings[tr] = struct{}{}
	p.mu.Unlock()

	read()

	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.readings, tr)
	if len(tr.keys) == 0 {
		return nil
	}
	if t := p.byTenant[tenant]; t != nil {
		for k := range tr.keys {
			t.again[k] = struct{}{}
			if p.busy[k] == 0 {
				select {
				case t.wake <- struct{}{}:
				default:
				}
			}
		}
	}
	return tr.keys
}

// ready returns those of keys that no change of this server holds back,
// and keeps the others in t.again until it ends.
func (p *polls) ready(t *tenantPolls, keys []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.DeleteFunc(keys, func(k string) bool {
		if p.busy[k] > 0 {
			t.again[k] = struct{}{}
			return true
		}
		return false
	})
}

// takeAgain returns the keys held back in t.again whose change is over.
func (p *polls) takeAgain(t *tenantPolls) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keys []string
	for k := range t.again {
		if p.busy[k] == 0 {
			keys = append(keys, k)
			delete(t.again, k)
		}
	}
	return keys
}

// publish hands r to every feed of t.
func (p *polls) publish(t *tenantPolls, r pollResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for f := range t.subs {
		f.put(r)
	}
}

// loop reads tenant's keys as the store tells of changes, or every interval
// where it cannot, until ctx ends, and hands each reading to every feed of
// t. A watch of the store that ends is opened again after a poll.
func (p *polls) loop(ctx context.Context, tenant string, t *tenantPolls) {
	for ctx.Err() == nil {
		notices, err := p.store.WatchPrefix(ctx, namespace(tenant))
		if err != nil {
			if !p.poll(ctx, tenant, t, !errors.Is(err, errors.ErrUnsupported)) {
				return
			}
			continue
		}
		// What changed before the watch began is unknown to the streams
		// whose baseline is older: read everything once.
		r, ok := p.readAll(ctx, tenant), true
		for ; ok && ctx.Err() == nil; r, ok = p.nextReading(ctx, tenant, t, notices) {
			p.publish(t, r)
			// Notices that arrive meanwhile wait, and the store's
			// watch merges them: a key that changes on every handoff
			// of a long queue is read at most once a gap, not per
			// change (over etcd, one read of a key is one of its
			// whole queue).
			if !sleepUntil(ctx, r.start.Add(minReadingGap)) {
				return
			}
		}
	}
}

// nextReading waits for the next reading that notices or t.wake call for,
// and makes it; false when ctx ends or the watch ended.
func (p *polls) nextReading(ctx context.Context, tenant string, t *tenantPolls, notices <-chan []string) (pollResult, bool) {
	for {
		select {
		case <-ctx.Done():
			return pollResult{}, false
		case <-t.wake:
			if keys := p.takeAgain(t); len(keys) > 0 {
				return p.readKeys(ctx, tenant, keys), true
			}
		case keys, ok := <-notices:
			switch {
			case !ok:
				return pollResult{}, false
			case len(keys) == 0 || len(keys) > maxInspectsPerNotice:
				return p.readAll(ctx, tenant), true
			}
			if keys = p.ready(t, keys); len(keys) > 0 {
				return p.readKeys(ctx, tenant, keys), true
			}
		}
	}
}

// minReadingGap is the least time between the starts of two readings that
// notices call for: at most 20 a second per tenant. The first change after
// a quiet gap is read at once.
const minReadingGap = 50 * time.Millisecond

// sleepUntil waits until t or until ctx ends (false).
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// maxInspectsPerNotice is the most keys a notice is read by Inspect; one
// naming more is read with one List of the namespace.
const maxInspectsPerNotice = 64

// poll reads tenant's keys every interval until ctx ends (it returns false) or, when
// retry is true, once a watch of the store may be tried again (a minute).
func (p *polls) poll(ctx context.Context, tenant string, t *tenantPolls, retry bool) bool {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	var again <-chan time.Time
	if retry {
		again = time.After(time.Minute)
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-again:
			return true
		case <-tick.C:
		}
		p.takeAgain(t) // the keys held back: this reading of every key reads them
		r := p.readAll(ctx, tenant)
		if ctx.Err() != nil {
			return false
		}
		p.publish(t, r)
	}
}

// readAll lists every key of tenant, sorted, but those it leaves unread.
func (p *polls) readAll(ctx context.Context, tenant string) pollResult {
	r := pollResult{start: time.Now()}
	r.unread = p.reading(tenant, func() { r.infos, r.err = p.store.List(ctx, namespace(tenant)) })
	r.infos = slices.DeleteFunc(r.infos, func(i distlock.Info) bool { return r.unread[i.Key] })
	slices.SortFunc(r.infos, func(a, b distlock.Info) int { return strings.Compare(a.Key, b.Key) })
	return r
}

// readKeys inspects each of keys of tenant, but those it leaves unread.
func (p *polls) readKeys(ctx context.Context, tenant string, keys []string) pollResult {
	r := pollResult{start: time.Now(), keys: slices.Sorted(slices.Values(keys))}
	var err error
	unread := p.reading(tenant, func() {
		for _, k := range r.keys {
			var info distlock.Info
			if info, err = p.store.of(k).Inspect(ctx, k); err != nil {
				return
			}
			if info.Held {
				info.Key = k
				r.infos = append(r.infos, info)
			}
		}
	})
	if err != nil {
		return pollResult{start: r.start, err: err}
	}
	r.keys = slices.DeleteFunc(r.keys, func(k string) bool { return unread[k] })
	r.infos = slices.DeleteFunc(r.infos, func(i distlock.Info) bool { return unread[i.Key] })
	return r
}
