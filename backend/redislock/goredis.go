package redislock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
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
	st := &goRedis{c: client, bounded: contextTimeoutEnabled(client), readTimeout: readTimeout(client)}
	if cfg.ack.replicas > 0 {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, fmt.Errorf("redislock: replica acknowledgement: %w: it needs a *redis.Client or *redis.ClusterClient, to send WAIT on the connection of the write; got %T", driver.ErrInvalidOption, client)
		}
	}
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
	// readTimeout is the client's ReadTimeout, which bounds a pipeline's
	// replies whatever the context says (0: none).
	readTimeout time.Duration
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

func readTimeout(c redis.UniversalClient) time.Duration {
	var d time.Duration
	switch c := c.(type) {
	case *redis.Client:
		d = c.Options().ReadTimeout
	case *redis.ClusterClient:
		d = c.Options().ReadTimeout
	}
	return max(d, 0) // -1 and -2: no timeout
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
	return bound(g, ctx, func(ctx context.Context) *redis.Cmd { return sc.Run(ctx, g.c, keys, vals...) },
		func(err error) *redis.Cmd {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd
		})
}

// bound returns req's result within ctx even if the client ignores its
// deadline: unless the client bounds requests itself, req runs in a
// goroutine, and cut makes the result of a request abandoned when ctx
// ended.
func bound[T any](g *goRedis, ctx context.Context, req func(context.Context) T, cut func(error) T) T {
	if g.bounded || ctx.Done() == nil {
		return req(ctx)
	}
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		return req(ctx)
	}
	g.late.Add(1)
	g.mu.Unlock()
	done := make(chan T, 1)
	go func() {
		defer g.late.Done()
		done <- req(ctx)
	}()
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		return cut(ctx.Err())
	}
}

// evalIntAcked pipelines EVALSHA (EVAL after NOSCRIPT) and WAIT on one
// connection of the client's pool, or on a Cluster of the pool of the
// master that serves the keys' slot (MasterForKey): go-redis sends a
// pipeline of a *redis.Client on one connection, in order, and routes a
// keyless command such as WAIT to a random node in a *redis.ClusterClient's.
// WAIT waits less than the client's ReadTimeout, which bounds its reply.
func (g *goRedis) evalIntAcked(ctx context.Context, s script, keys []string, args []string, replicas int, wait time.Duration) (int64, int, error) {
	if g.readTimeout > 0 {
		wait = min(wait, g.readTimeout*3/4)
	}
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a
	}
	type reply struct {
		n, acked int64
		err      error
	}
	r := bound(g, ctx, func(ctx context.Context) reply {
		c, err := g.master(ctx, keys[0])
		if err != nil {
			return reply{err: err}
		}
		run := func(eval func(redis.Pipeliner) *redis.Cmd) reply {
			var ev, ack *redis.Cmd
			_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
				ev = eval(p)
				ack = p.Do(ctx, "wait", replicas, waitMillis(wait))
				return nil
			})
			n, err := ev.Int64()
			if err != nil {
				return reply{err: err}
			}
			acked, err := ack.Int64()
			return reply{n: n, acked: acked, err: err}
		}
		sc := g.scripts[s]
		rep := run(func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sc.Hash(), keys, vals...) })
		if rep.err != nil && redis.HasErrorPrefix(rep.err, "NOSCRIPT") {
			rep = run(func(p redis.Pipeliner) *redis.Cmd { return p.Eval(ctx, scriptSources[s], keys, vals...) })
		}
		if cc, ok := g.c.(*redis.ClusterClient); ok && rep.err != nil && (redis.HasErrorPrefix(rep.err, "MOVED") || redis.HasErrorPrefix(rep.err, "ASK")) {
			cc.ReloadState(ctx) // the slot moved: the next request finds its master
		}
		return rep
	}, func(err error) reply { return reply{err: err} })
	return r.n, int(r.acked), r.err
}

// master returns the client of the node that serves key: the client
// itself, or a Cluster's master of key's slot.
func (g *goRedis) master(ctx context.Context, key string) (*redis.Client, error) {
	switch c := g.c.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("WAIT needs a *redis.Client or *redis.ClusterClient, got %T", g.c)
}

func (g *goRedis) evalInt(ctx context.Context, s script, keys []string, args ...string) (int64, error) {
	return g.run(ctx, s, keys, args).Int64()
}

// sharded is true for any client but a *redis.Client (one server, or
// Sentinel's current master).
func (g *goRedis) sharded() bool {
	_, one := g.c.(*redis.Client)
	return !one
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
