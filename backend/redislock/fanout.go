package redislock

import (
	"context"
	"errors"
	"sync"
)

// fanout is a backend's subscription on a Redis Cluster (or a go-redis
// Ring): one connection per master, each subscribed to the backend's one
// channel. A release's PUBLISH then reaches the client from the node that
// runs the release's script, not over the cluster bus (which now and then
// holds small messages back for tens of milliseconds under load), and its
// count of listeners counts every client that listens: PUBLISH on a Cluster
// counts only the subscribers connected to the node that runs it. The other
// masters deliver the bus's copy too; a second notice is harmless.
type fanout struct {
	ev pubsubEvents
	// masters returns, per master's address, a single-node subscription
	// connection reporting to the events it is given.
	masters func(ctx context.Context) (map[string]func(pubsubEvents) pubsub, error)

	mu     sync.Mutex
	nodes  map[string]*fanoutNode
	closed bool
}

type fanoutNode struct {
	ps        pubsub
	confirmed map[string]bool // channels
}

func newFanout(ev pubsubEvents, masters func(context.Context) (map[string]func(pubsubEvents) pubsub, error)) *fanout {
	return &fanout{ev: ev, masters: masters, nodes: make(map[string]*fanoutNode)}
}

// subscribe subscribes channels on every master the client knows now, and
// closes the connections to nodes that are no longer masters. A channel is
// reported subscribed once every master confirmed it.
func (f *fanout) subscribe(ctx context.Context, channels []string) error {
	masters, err := f.masters(ctx)
	if err != nil {
		return err
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return errors.New("subscription closed")
	}
	var stale []pubsub
	for addr, n := range f.nodes {
		if masters[addr] == nil {
			stale = append(stale, n.ps)
			delete(f.nodes, addr)
		}
	}
	subs := make([]pubsub, 0, len(masters))
	for addr, mk := range masters {
		n := f.nodes[addr]
		if n == nil {
			n = &fanoutNode{confirmed: make(map[string]bool)}
			n.ps = mk(pubsubEvents{
				message:    f.ev.message,
				subscribed: func(ch string) { f.confirmed(addr, ch) },
				lost:       func() { f.lostNode(addr) },
			})
			f.nodes[addr] = n
		}
		subs = append(subs, n.ps)
	}
	f.mu.Unlock()
	var errs []error
	for _, ps := range stale {
		errs = append(errs, ps.close())
	}
	for _, ps := range subs {
		errs = append(errs, ps.subscribe(ctx, channels))
	}
	return errors.Join(errs...)
}

// confirmed records a master's confirmation of ch, and reports ch
// subscribed once every master confirmed it.
func (f *fanout) confirmed(addr, ch string) {
	f.mu.Lock()
	n := f.nodes[addr]
	if n == nil || f.closed {
		f.mu.Unlock()
		return
	}
	n.confirmed[ch] = true
	all := true
	for _, n := range f.nodes {
		all = all && n.confirmed[ch]
	}
	f.mu.Unlock()
	if all {
		f.ev.subscribed(ch)
	}
}

// lostNode forgets a master's confirmations after its connection failed.
func (f *fanout) lostNode(addr string) {
	f.mu.Lock()
	if n := f.nodes[addr]; n != nil {
		clear(n.confirmed)
	}
	closed := f.closed
	f.mu.Unlock()
	if !closed {
		f.ev.lost()
	}
}

func (f *fanout) close() error {
	f.mu.Lock()
	f.closed = true
	nodes := f.nodes
	f.nodes = nil
	f.mu.Unlock()
	var errs []error
	for _, n := range nodes {
		errs = append(errs, n.ps.close())
	}
	return errors.Join(errs...)
}
