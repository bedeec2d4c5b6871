package redislock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// NewRueidis returns a backend on a rueidis client (single node, Sentinel or
// Cluster). rueidis pipelines concurrent requests on shared connections,
// which makes it the faster client under concurrency; Open builds one.
// rueidis bounds every request by its context. Close leaves client open.
//
// NewRueidis asks the server for its version (INFO server, on every node the
// client knows), within the request timeout, and fails if it cannot reach it
// or if it runs a Redis older than MinVersion.
func NewRueidis(client rueidis.Client, opts ...Option) (*Backend, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("redislock: NewRueidis needs a client")
	}
	return newRueidis(context.Background(), client, false, cfg, nil)
}

// newRueidis returns a backend on client; track, if not nil, is the
// tracker whose invalidated the client's OnInvalidations calls.
func newRueidis(ctx context.Context, client rueidis.Client, owned bool, cfg config, track *tracker) (*Backend, error) {
	st := &rueidisStore{c: client, owned: owned, track: track}
	for i, src := range scriptSources {
		st.scripts[i] = rueidis.NewLuaScript(src)
		sum := sha1.Sum([]byte(src))
		st.shas[i] = hex.EncodeToString(sum[:])
	}
	b, err := newBackend(ctx, st, cfg)
	if err == nil && cfg.ack.replicas > 0 {
		st.dialBlocking(ctx, cfg.requestTimeout)
	}
	return b, err
}

// dialBlocking has each node's pool of dedicated connections, on which
// WAIT goes with its script, dial one now rather than at the first grant,
// whose lease it would eat into: WAIT 0 1 answers at once. It is best
// effort (a replica answers WAIT with an error), within timeout.
func (r *rueidisStore) dialBlocking(ctx context.Context, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, n := range r.c.Nodes() {
		_ = n.Do(ctx, n.B().Wait().Numreplicas(0).Timeout(1).Build()).Error()
	}
}

// rueidisStore is the store adapter for rueidis.
type rueidisStore struct {
	c       rueidis.Client
	scripts [numScripts]*rueidis.Lua
	shas    [numScripts]string // each script's SHA1, for EVALSHA beside WAIT
	owned   bool               // built by Open: Close closes it
	track   *tracker           // set by Dial on a client that tracks reads
}

// tracker returns the tracker whose invalidated the client calls, if the
// client tracks reads (Dial's, on Redis 6 and later).
func (r *rueidisStore) tracker() *tracker { return r.track }

// trackedTTL is how long the client caches a tracked read: a key read
// again after it re-reads from Redis even without an invalidation.
const trackedTTL = time.Minute

// readTracked reads names with client-side caching, which tracks them.
// A name the client has read since its last invalidation is answered from
// the client's cache: it has not been written since.
func (r *rueidisStore) readTracked(ctx context.Context, names []string) ([]trackedValue, error) {
	cmds := make([]rueidis.CacheableTTL, len(names))
	for i, n := range names {
		// Pinned: rueidis recycles a cached read whose answer is "aborted"
		// (its connection closed) while its writer may still be sending it,
		// and the next command built, another node's grant say, would be
		// written over it as it goes out.
		cmds[i] = rueidis.CT(r.c.B().Get().Key(n).Cache().Pin(), trackedTTL)
	}
	values := make([]trackedValue, len(names))
	for i, res := range r.c.DoMultiCache(ctx, cmds...) {
		v, err := res.ToString()
		switch {
		case rueidis.IsRedisNil(err):
		case err != nil:
			return nil, err
		default:
			values[i] = trackedValue{value: v, exists: true}
		}
	}
	return values, nil
}

func (r *rueidisStore) evalInt(ctx context.Context, s script, keys []string, args ...string) (int64, error) {
	return r.scripts[s].Exec(ctx, r.c, keys, args).AsInt64()
}

func (r *rueidisStore) sharded() bool { return r.c.Mode() == rueidis.ClientModeCluster }

func (r *rueidisStore) evalStrings(ctx context.Context, s script, keys []string, args ...string) ([]string, error) {
	return r.scripts[s].Exec(ctx, r.c, keys, args).AsStrSlice()
}

// evalIntAcked sends EVALSHA (EVAL after NOSCRIPT) and WAIT in one DoMulti.
// rueidis sends a DoMulti that holds a blocking command, as WAIT is, on one
// connection of its pool of dedicated ones, in order; on a Cluster it sends
// a keyless command such as WAIT with the commands beside it that have a
// slot, to the master of that slot. The script's write and the WAIT thus
// share a connection, whose last write is what WAIT waits for.
func (r *rueidisStore) evalIntAcked(ctx context.Context, s script, keys []string, args []string, replicas int, wait time.Duration) (int64, int, error) {
	n, acked, err := r.evalWait(ctx, r.c.B().Evalsha().Sha1(r.shas[s]).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), replicas, wait)
	if e, ok := rueidis.IsRedisErr(err); ok && e.IsNoScript() {
		n, acked, err = r.evalWait(ctx, r.c.B().Eval().Script(scriptSources[s]).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), replicas, wait)
	}
	return n, acked, err
}

func (r *rueidisStore) evalWait(ctx context.Context, eval rueidis.Completed, replicas int, wait time.Duration) (int64, int, error) {
	res := r.c.DoMulti(ctx, eval, r.c.B().Wait().Numreplicas(int64(replicas)).Timeout(waitMillis(wait)).Build())
	n, err := res[0].AsInt64()
	if err != nil {
		return 0, 0, err
	}
	acked, err := res[1].AsInt64()
	return n, int(acked), err
}

func (r *rueidisStore) scan(ctx context.Context, match string, fn func(string)) error {
	for _, n := range r.c.Nodes() {
		for cursor, first := uint64(0), true; first || cursor != 0; first = false {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(match).Count(256).Build()).AsScanEntry()
			if err != nil {
				return err
			}
			for _, k := range e.Elements {
				fn(k)
			}
			cursor = e.Cursor
		}
	}
	return nil
}

func (r *rueidisStore) serverInfo(ctx context.Context) ([]string, error) {
	var infos []string
	for _, n := range r.c.Nodes() {
		info, err := n.Do(ctx, n.B().Info().Section("server").Build()).ToString()
		if err != nil {
			return nil, err
		}
		infos = append(infos, info)
	}
	return infos, nil
}

func (r *rueidisStore) closedErr(err error) bool { return errors.Is(err, rueidis.ErrClosing) }

func (r *rueidisStore) close() error {
	if r.owned {
		r.c.Close()
	}
	return nil
}

func (r *rueidisStore) newPubSub(ev pubsubEvents) pubsub {
	if r.c.Mode() != rueidis.ClientModeCluster {
		return &rueidisPubSub{c: r.c, ev: ev}
	}
	return newFanout(ev, func(ctx context.Context) (map[string]func(pubsubEvents) pubsub, error) {
		nodes, err := r.masters(ctx)
		if err != nil {
			return nil, err
		}
		masters := make(map[string]func(pubsubEvents) pubsub, len(nodes))
		for addr, n := range nodes {
			masters[addr] = func(ev pubsubEvents) pubsub { return &rueidisPubSub{c: n, ev: ev} }
		}
		return masters, nil
	})
}

// masters returns a client of each master of a Cluster, by address, or the
// client itself, which writes to the one master, elsewhere.
func (r *rueidisStore) masters(ctx context.Context) (map[string]rueidis.Client, error) {
	if r.c.Mode() != rueidis.ClientModeCluster {
		return map[string]rueidis.Client{"": r.c}, nil
	}
	masters := make(map[string]rueidis.Client)
	for addr, n := range r.c.Nodes() { // masters and replicas
		role, err := n.Do(ctx, n.B().Role().Build()).ToArray()
		if err != nil {
			return nil, err
		}
		if len(role) > 0 {
			if kind, _ := role[0].ToString(); kind == "master" {
				masters[addr] = n
			}
		}
	}
	return masters, nil
}

// trackPrefix: see prefixTracker. Each master's connection is a dedicated
// one, whose tracking is switched off first (a client with client-side
// caching has it on in the default mode) and then on in broadcast mode;
// rueidis switches it off again when the connection goes back to its pool.
func (r *rueidisStore) trackPrefix(ctx context.Context, prefix string, changed func([]string)) (<-chan struct{}, func(), error) {
	nodes, err := r.masters(ctx)
	if err != nil {
		return nil, nil, err
	}
	broken := make(chan struct{})
	var (
		once    sync.Once
		readers sync.WaitGroup
		conns   []rueidis.DedicatedClient
	)
	stop := func() {
		for _, dc := range conns {
			dc.Close()
		}
		readers.Wait()
	}
	for _, n := range nodes {
		dc, _ := n.Dedicate() // dc.Close gives it back
		conns = append(conns, dc)
		ended := dc.SetOnInvalidations(func(ms []rueidis.RedisMessage) {
			if ms == nil {
				changed(nil)
				return
			}
			names := make([]string, 0, len(ms))
			for _, m := range ms {
				if name, err := m.ToString(); err == nil {
					names = append(names, name)
				}
			}
			changed(names)
		})
		readers.Add(1)
		go func() {
			defer readers.Done()
			<-ended
			once.Do(func() { close(broken) })
		}()
		for _, res := range dc.DoMulti(ctx,
			dc.B().ClientTracking().Off().Build(),
			dc.B().Arbitrary("CLIENT", "TRACKING").Args("ON", "BCAST", "PREFIX", prefix).Build()) {
			if err := res.Error(); err != nil {
				stop()
				return nil, nil, err
			}
		}
	}
	return broken, stop, nil
}

// rueidisPubSub is a dedicated rueidis connection to one node with pub/sub
// hooks. When it breaks, the next subscribe dedicates a new one.
type rueidisPubSub struct {
	c  rueidis.Client
	ev pubsubEvents

	mu      sync.Mutex
	dc      rueidis.DedicatedClient
	closed  bool
	watcher sync.WaitGroup
}

// conn returns the live dedicated connection, making one if needed.
func (p *rueidisPubSub) conn() (rueidis.DedicatedClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, rueidis.ErrClosing
	}
	if p.dc != nil {
		return p.dc, nil
	}
	dc, _ := p.dedicate() // dc.Close releases it
	broken := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) { p.ev.message(m.Channel, m.Message) },
		OnSubscription: func(s rueidis.PubSubSubscription) {
			if s.Kind == "subscribe" {
				p.ev.subscribed(s.Channel)
			}
		},
	})
	p.dc = dc
	p.watcher.Add(1)
	go func() {
		defer p.watcher.Done()
		<-broken
		p.mu.Lock()
		lost := p.dc == dc && !p.closed
		if p.dc == dc {
			p.dc = nil
		}
		p.mu.Unlock()
		dc.Close()
		if lost {
			p.ev.lost()
		}
	}()
	return dc, nil
}

// dedicate takes a connection for the subscription, on the client's node
// (on a Cluster, fanout gives each master's own client).
func (p *rueidisPubSub) dedicate() (rueidis.DedicatedClient, func()) { return p.c.Dedicate() }

func (p *rueidisPubSub) subscribe(ctx context.Context, channels []string) error {
	dc, err := p.conn()
	if err != nil {
		return err
	}
	return dc.Do(ctx, dc.B().Subscribe().Channel(channels...).Build()).Error()
}

func (p *rueidisPubSub) close() error {
	p.mu.Lock()
	p.closed = true
	dc := p.dc
	p.mu.Unlock()
	if dc != nil {
		dc.Close()
	}
	p.watcher.Wait()
	return nil
}
