package redislock

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// New returns a backend on a go-redis client: a *redis.Client (single node,
// or Sentinel through redis.NewFailoverClient), a *redis.ClusterClient, or
// whatever redis.NewUniversalClient returns. Close leaves client open.
//
// Set ContextTimeoutEnabled in the client's options: go-redis then bounds
// each request by its context's deadline, as the watchdog needs when Redis
// is unreachable. Without it the backend still returns at the deadline, but
// the abandoned request holds a goroutine and a connection until the
// client's ReadTimeout.
//
// New asks the server for its version (INFO server, on every master of a
// Cluster), within the request timeout, and fails if it cannot reach it or
// if it runs a Redis older than MinVersion.
func New(client redis.UniversalClient, opts ...Option) (*Backend, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("redislock: New needs a client")
	}
	st := &goRedis{c: client, bounded: contextTimeoutEnabled(client)}
	for i, src := range scriptSources {
		st.scripts[i] = redis.NewScript(src)
	}
	return newBackend(context.Background(), st, cfg)
}

// goRedis is the store adapter for go-redis.
type goRedis struct {
	c       redis.UniversalClient
	scripts [numScripts]*redis.Script
	bounded bool           // the client honours context deadlines itself
	late    sync.WaitGroup // requests abandoned at their deadline, when !bounded
	mu      sync.Mutex     // orders late.Add before close's late.Wait
	closing bool           // close has begun: requests run in the caller
}

func contextTimeoutEnabled(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// run runs the lock script s within ctx even if the client ignores its
// deadline.
func (g *goRedis) run(ctx context.Context, s script, keys []string, args []string) *redis.Cmd {
	return g.runScript(ctx, g.scripts[s], keys, args)
}

// runScript runs sc within ctx even if the client ignores its deadline.
func (g *goRedis) runScript(ctx context.Context, sc *redis.Script, keys []string, args []string) *redis.Cmd {
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a
	}
	if g.bounded || ctx.Done() == nil {
		return sc.Run(ctx, g.c, keys, vals...)
	}
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		return sc.Run(ctx, g.c, keys, vals...)
	}
	g.late.Add(1)
	g.mu.Unlock()
	done := make(chan *redis.Cmd, 1)
	go func() {
		defer g.late.Done()
		done <- sc.Run(ctx, g.c, keys, vals...)
	}()
	select {
	case cmd := <-done:
		return cmd
	case <-ctx.Done():
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

func (g *goRedis) evalInt(ctx context.Context, s script, keys []string, args ...string) (int64, error) {
	return g.run(ctx, s, keys, args).Int64()
}

func (g *goRedis) evalStrings(ctx context.Context, s script, keys []string, args ...string) ([]string, error) {
	return g.run(ctx, s, keys, args).StringSlice()
}

func (g *goRedis) scan(ctx context.Context, match string, fn func(string)) error {
	var mu sync.Mutex // forEachMaster runs nodes concurrently
	return g.forEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, match, 256).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			fn(it.Val())
			mu.Unlock()
		}
		return it.Err()
	})
}

func (g *goRedis) serverInfo(ctx context.Context) ([]string, error) {
	var (
		mu    sync.Mutex
		infos []string
	)
	err := g.forEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "server").Result()
		mu.Lock()
		infos = append(infos, info)
		mu.Unlock()
		return err
	})
	if errors.Is(err, errNoNodes) { // another UniversalClient: ask it once
		info, err := g.c.Info(ctx, "server").Result()
		return []string{info}, err
	}
	return infos, err
}

var errNoNodes = errors.New("listing needs a *redis.Client, *redis.ClusterClient or *redis.Ring")

// forEachMaster calls fn with a client of each master, concurrently.
func (g *goRedis) forEachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	switch c := g.c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Ring:
		return c.ForEachShard(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return errNoNodes
}

func (g *goRedis) closedErr(err error) bool { return errors.Is(err, redis.ErrClosed) }

func (g *goRedis) close() error {
	g.mu.Lock()
	g.closing = true
	g.mu.Unlock()
	g.late.Wait()
	return nil
}

func (g *goRedis) newPubSub(ev pubsubEvents) pubsub {
	switch g.c.(type) {
	case *redis.ClusterClient, *redis.Ring:
	default:
		return &goRedisPubSub{c: g.c, ev: ev}
	}
	return newFanout(ev, func(ctx context.Context) (map[string]func(pubsubEvents) pubsub, error) {
		var mu sync.Mutex
		masters := make(map[string]func(pubsubEvents) pubsub)
		err := g.forEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			masters[c.Options().Addr] = func(ev pubsubEvents) pubsub { return &goRedisPubSub{c: c, ev: ev} }
			return nil
		})
		return masters, err
	})
}

// goRedisPubSub is one go-redis PubSub with a reader goroutine (on a
// Cluster, fanout gives each master's own client). go-redis
// reconnects and resubscribes by itself; lost still tells the hub, so that
// waiters re-check keys whose notices were missed.
type goRedisPubSub struct {
	c  redis.UniversalClient
	ev pubsubEvents

	mu     sync.Mutex
	ps     *redis.PubSub
	cancel context.CancelFunc
	done   chan struct{}
}

const (
	// healthInterval is how long the reader waits for traffic before it
	// pings, so that a dead connection is noticed.
	healthInterval = 5 * time.Second
	// reconnectPause spaces the reader's receives after a connection failure.
	reconnectPause = 100 * time.Millisecond
)

func (p *goRedisPubSub) subscribe(ctx context.Context, channels []string) error {
	p.mu.Lock()
	if p.ps == nil {
		p.ps = p.c.Subscribe(ctx)
		rctx, cancel := context.WithCancel(context.Background())
		p.cancel, p.done = cancel, make(chan struct{})
		go p.read(rctx, p.ps)
	}
	ps := p.ps
	p.mu.Unlock()
	return ps.Subscribe(ctx, channels...)
}

func (p *goRedisPubSub) read(ctx context.Context, ps *redis.PubSub) {
	defer close(p.done)
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, healthInterval)
		switch m := msg.(type) {
		case *redis.Message:
			p.ev.message(m.Channel, m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				p.ev.subscribed(m.Channel)
			}
		}
		if err == nil || ctx.Err() != nil {
			continue
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			_ = ps.Ping(ctx) // a write on a dead connection makes go-redis reconnect
			continue
		}
		p.ev.lost()
		select { // go-redis reconnects on the next receive; do not spin meanwhile
		case <-ctx.Done():
		case <-time.After(reconnectPause):
		}
	}
}

func (p *goRedisPubSub) close() error {
	p.mu.Lock()
	ps, cancel, done := p.ps, p.cancel, p.done
	p.ps = nil
	p.mu.Unlock()
	if ps == nil {
		return nil
	}
	cancel()
	err := ps.Close()
	<-done
	return err
}
