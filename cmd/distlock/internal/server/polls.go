package server

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock"
)

// polls shares one poll of a tenant's namespace among all its Watch
// streams: every Limits.WatchInterval one List of the tenant's keys, sorted
// once, whatever the number of streams or their prefixes. A poll per stream
// made the store's and the server's work grow with the streams (20 streams
// of one tenant at 1 000 keys kept two cores busy).
type polls struct {
	client   *distlock.Client
	interval time.Duration
	stopCtx  context.Context // Shutdown ends every loop

	mu       sync.Mutex
	byTenant map[string]*tenantPolls
}

// tenantPolls is the loop of one tenant and the streams it feeds.
type tenantPolls struct {
	subs map[*pollFeed]struct{}
	stop context.CancelFunc
}

// pollFeed is one stream's feed of polls: only the latest is kept, so a
// slow stream never holds the loop back.
type pollFeed struct{ ch chan pollResult }

// pollResult is one poll of a tenant's keys, sorted by key, begun at start;
// infos is shared by every stream and must not be changed.
type pollResult struct {
	infos []distlock.Info
	start time.Time
	err   error
}

// subscribe returns a feed of tenant's polls, starting its loop if it is
// the first; end it with unsubscribe.
func (p *polls) subscribe(tenant string) *pollFeed {
	f := &pollFeed{ch: make(chan pollResult, 1)}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.byTenant[tenant]
	if t == nil {
		if p.byTenant == nil {
			p.byTenant = make(map[string]*tenantPolls)
		}
		ctx, stop := context.WithCancel(p.stopCtx)
		t = &tenantPolls{subs: make(map[*pollFeed]struct{}), stop: stop}
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

// loop polls tenant's keys every interval until ctx ends, and hands each
// poll to every feed of t.
func (p *polls) loop(ctx context.Context, tenant string, t *tenantPolls) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r := pollResult{start: time.Now()}
		r.infos, r.err = p.client.List(ctx, namespace(tenant))
		if ctx.Err() != nil {
			return
		}
		slices.SortFunc(r.infos, func(a, b distlock.Info) int { return strings.Compare(a.Key, b.Key) })
		p.mu.Lock()
		for f := range t.subs {
			select { // replace a poll the stream has not taken yet
			case <-f.ch:
			default:
			}
			f.ch <- r
		}
		p.mu.Unlock()
	}
}
