package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
)

// Backend is Redlock over independent Redis nodes. It is safe for
// concurrent use.
type Backend struct {
	nodes  []node
	quorum int
	cfg    config
	closed atomic.Bool
	// lastRoundTrip is the time, in ns, the last Acquire that every node
	// answered took; Watch spreads its notices over four times that.
	lastRoundTrip atomic.Int64
	work          *workers // send the requests to all nodes but the first
}

// node is one Redis node: its address (for errors) and its backend.
type node struct {
	addr string
	b    *redislock.Backend
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.Lister        = (*Backend)(nil)
	_ driver.PageLister    = (*Backend)(nil)
	_ driver.ForceReleaser = (*Backend)(nil)
	_ driver.Namer         = (*Backend)(nil)
)

// NodeError is the failure of one node, named by its address. Err is the
// node's error, which names neither the operation nor the key (the client
// names them once for every node).
type NodeError struct {
	Addr string
	Err  error
}

// Error says the node and its failure; a sentinel's "distlock: " is left
// out, since the error the node's failure is part of says it.
func (e *NodeError) Error() string {
	return "node " + e.Addr + ": " + strings.TrimPrefix(e.Err.Error(), "distlock: ")
}

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// New returns Redlock over go-redis clients, one per node: each a
// *redis.Client of its own independent Redis (no replicas, no Cluster).
// There must be an odd number of them, at least 3. Set
// ContextTimeoutEnabled in their options, as redislock.New says. Close
// leaves the clients open.
//
// New asks every node for its version, in parallel within the request
// timeout, and fails, naming each node that failed, unless all answer.
func New(clients []redis.UniversalClient, opts ...Option) (*Backend, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(clients))
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("redlock: New: %w: client %d is nil", driver.ErrInvalidOption, i)
		}
		addrs[i] = fmt.Sprintf("#%d", i)
		if rc, ok := c.(*redis.Client); ok {
			addrs[i] = rc.Options().Addr
		}
	}
	return newBackend(context.Background(), cfg, addrs, func(_ context.Context, i int) (*redislock.Backend, error) {
		return redislock.New(clients[i], cfg.nodeOptions()...)
	})
}

// NewRueidis returns Redlock over rueidis clients, one per independent
// Redis node, as New does over go-redis clients. Close leaves the clients
// open.
func NewRueidis(clients []rueidis.Client, opts ...Option) (*Backend, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(clients))
	for i, c := range clients {
		if c == nil {
			return nil, fmt.Errorf("redlock: NewRueidis: %w: client %d is nil", driver.ErrInvalidOption, i)
		}
		addrs[i] = fmt.Sprintf("#%d", i)
		for a := range c.Nodes() {
			addrs[i] = a
		}
	}
	return newBackend(context.Background(), cfg, addrs, func(_ context.Context, i int) (*redislock.Backend, error) {
		return redislock.NewRueidis(clients[i], cfg.nodeOptions()...)
	})
}

// newBackend checks the number of nodes and their addresses, then builds
// every node's backend with open, in parallel. If one fails it closes the
// others and returns every failure, each naming its node.
func newBackend(ctx context.Context, cfg config, addrs []string, open func(ctx context.Context, i int) (*redislock.Backend, error)) (*Backend, error) {
	if err := checkNodes(addrs); err != nil {
		return nil, err
	}
	b := &Backend{nodes: make([]node, len(addrs)), quorum: len(addrs)/2 + 1, cfg: cfg, work: newWorkers()}
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() {
			b.nodes[i] = node{addr: a}
			b.nodes[i].b, errs[i] = open(ctx, i)
		})
	}
	wg.Wait()
	if err := b.nodeErrors(errs); err != nil {
		for _, n := range b.nodes {
			if n.b != nil {
				_ = n.b.Close()
			}
		}
		b.work.close()
		return nil, fmt.Errorf("redlock: %w", err)
	}
	return b, nil
}

// Name returns "redlock".
func (b *Backend) Name() string { return "redlock" }

// Nodes returns the nodes' addresses, in the order given.
func (b *Backend) Nodes() []string {
	addrs := make([]string, len(b.nodes))
	for i, n := range b.nodes {
		addrs[i] = n.addr
	}
	return addrs
}

// each runs op on every node at once, op(ctx, i, node i's backend), the
// first in the calling goroutine and the others on workers, and returns the
// nodes' errors in node order.
func (b *Backend) each(ctx context.Context, op func(ctx context.Context, i int, n *redislock.Backend) error) []error {
	errs := make([]error, len(b.nodes))
	var wg sync.WaitGroup
	wg.Add(len(b.nodes) - 1)
	for i := 1; i < len(b.nodes); i++ {
		b.work.run(func() {
			defer wg.Done()
			errs[i] = op(ctx, i, b.nodes[i].b)
		})
	}
	errs[0] = op(ctx, 0, b.nodes[0].b)
	wg.Wait()
	return errs
}

// nodeErrors joins the errors of errs that are failures (not a refusal: a
// key held by another, or not held), each as a *NodeError; nil if none.
func (b *Backend) nodeErrors(errs []error) error {
	var failed []error
	for i, err := range errs {
		if failure(err) {
			failed = append(failed, &NodeError{Addr: b.nodes[i].addr, Err: err})
		}
	}
	return errors.Join(failed...)
}

// failure reports whether err is a node's failure rather than its answer.
func failure(err error) bool {
	return err != nil && !errors.Is(err, driver.ErrNotAcquired) && !errors.Is(err, driver.ErrNotHeld)
}

// checkRequest checks once what every node would check, so that a bad
// request fails with one error rather than one per node.
func (b *Backend) checkRequest(key, token string, ttl *time.Duration) error {
	if b.closed.Load() {
		return driver.ErrClosed
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	switch {
	case token == "" || strings.Contains(token, "\n"):
		return fmt.Errorf("%w: token %q: want a non-empty token without a newline", driver.ErrInvalidOption, token)
	case ttl != nil && *ttl-b.cfg.drift(*ttl) <= 0:
		return fmt.Errorf("%w: time to live %v leaves no validity after the drift margin %v", driver.ErrInvalidOption, *ttl, b.cfg.drift(*ttl))
	}
	return nil
}

// Acquire asks every node at once to take req.Key for req.Token (each
// node's one-attempt acquire script, with its own fence), waiting for each
// reply at most the node timeout. The key is acquired if a majority of the
// nodes granted it and the validity, req.TTL less the time since the
// requests were sent and less the drift margin, is still positive. The
// grant's fence is the largest of the granting nodes' fences, and its Sent
// is when the requests were sent, from which distlock's client counts the
// validity.
//
// Otherwise the key is released on every node that granted it or whose
// reply did not come, and Acquire returns an error matching
// driver.ErrNotAcquired, joined with the failures of nodes if any, or, if
// so many nodes failed that no majority could have granted it, the
// failures alone: one *NodeError per node, naming its address.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.checkRequest(req.Key, req.Token, &req.TTL); err != nil {
		return driver.Grant{}, err
	}
	drift := b.cfg.drift(req.TTL)
	sent := time.Now()
	wait := b.cfg.replyWait(req.TTL, req.TTL-drift)
	actx, cancel := context.WithDeadline(ctx, sent.Add(wait))
	grants := make([]driver.Grant, len(b.nodes))
	errs := b.each(actx, func(ctx context.Context, i int, n *redislock.Backend) error {
		var err error
		grants[i], err = n.Acquire(ctx, req)
		return err
	})
	cancel()
	elapsed := time.Since(sent)
	granted, refused := 0, 0
	var fence uint64
	for i, err := range errs {
		switch {
		case err == nil:
			granted++
			fence = max(fence, grants[i].Fence)
		case errors.Is(err, driver.ErrNotAcquired):
			refused++
		}
	}
	if granted+refused == len(b.nodes) {
		b.lastRoundTrip.Store(int64(elapsed))
	}
	if granted >= b.quorum && elapsed < req.TTL-drift {
		return driver.Grant{Fence: fence, Sent: sent, Lost: b.lostWith(grants, errs)}, nil
	}
	b.undo(ctx, req.Key, req.Token, errs, wait)
	failed := len(b.nodes) - granted - refused
	var err error
	switch {
	case failed > len(b.nodes)-b.quorum: // no majority could have granted it
		err = b.nodeErrors(errs)
	case granted >= b.quorum:
		err = fmt.Errorf("%w: %d of %d nodes granted it, but the replies took %v of a validity of %v",
			driver.ErrNotAcquired, granted, len(b.nodes), elapsed.Round(time.Microsecond), req.TTL-drift)
	default:
		err = errors.Join(fmt.Errorf("%w: %d of %d nodes granted it, %d needed", driver.ErrNotAcquired, granted, len(b.nodes), b.quorum),
			b.nodeErrors(errs))
	}
	return driver.Grant{}, driver.Wrap("redlock", err)
}

// lostWith returns the Lost of a grant whose nodes' grants are grants
// (errs, Acquire's, say which granted): done once so many of those nodes
// told of their hold's loss (a forced release, a key deleted, expired or
// taken on that node) that fewer than a majority still hold, with the
// cause of the last node's loss. A node that grants without a Lost is
// counted as holding until the grant's renewal says otherwise.
func (b *Backend) lostWith(grants []driver.Grant, errs []error) context.Context {
	q := &quorumLoss{quorum: int64(b.quorum)}
	q.lost, q.end = context.WithCancelCause(context.Background())
	for _, err := range errs {
		if err == nil {
			q.holding.Add(1)
		}
	}
	for i, err := range errs {
		if err == nil && grants[i].Lost != nil {
			nodeLost := grants[i].Lost
			context.AfterFunc(nodeLost, func() { q.nodeLost(context.Cause(nodeLost)) })
		}
	}
	return q.lost
}

// quorumLoss follows the nodes of one Redlock grant.
type quorumLoss struct {
	lost    context.Context // the grant's Lost
	end     context.CancelCauseFunc
	holding atomic.Int64 // nodes that hold, as far as they told
	quorum  int64
}

// nodeLost counts the loss of one node's hold, with its cause.
func (q *quorumLoss) nodeLost(cause error) {
	if q.holding.Add(-1) < q.quorum {
		q.end(cause)
	}
}

// undo releases key for token on every node that granted it or whose reply
// did not come (errs are Acquire's), within wait, up to undoAttempts times
// per node; a node that does not answer frees the key when its time to
// live runs out.
func (b *Backend) undo(ctx context.Context, key, token string, errs []error, wait time.Duration) {
	undo := make([]bool, len(errs))
	pending := false
	for i, err := range errs {
		undo[i] = err == nil || failure(err) && !errors.Is(err, driver.ErrClosed)
		pending = pending || undo[i]
	}
	if !pending {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	b.each(ctx, func(ctx context.Context, i int, n *redislock.Backend) error {
		if !undo[i] {
			return nil
		}
		// A failed release is tried again at once, as a grant is not worth
		// leaving behind for one stale connection (the client reconnects).
		var err error
		for range undoAttempts {
			if err = n.Release(ctx, key, token); !failure(err) || errors.Is(err, driver.ErrClosed) || ctx.Err() != nil {
				break
			}
		}
		return err
	})
}

// undoAttempts bounds the releases undo sends to one node.
const undoAttempts = 3

// Renew resets key's time to live to ttl on every node at once, if token
// holds it there, waiting for each reply at most the node timeout. It
// succeeds if a majority of the nodes renewed it; distlock's client counts
// the new validity from when it sent the renewal. If so many nodes said
// that token does not hold the key that no majority can, the lock is lost:
// an error matching driver.ErrNotHeld. Otherwise it returns the nodes'
// failures, and the client tries again while the validity lasts.
func (b *Backend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := b.checkRequest(key, token, &ttl); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.replyWait(ttl, ttl-b.cfg.drift(ttl)))
	defer cancel()
	errs := b.each(rctx, func(ctx context.Context, _ int, n *redislock.Backend) error {
		return n.Renew(ctx, key, token, ttl)
	})
	renewed, notHeld := count(errs)
	switch {
	case renewed >= b.quorum:
		return nil
	case notHeld > len(b.nodes)-b.quorum:
		return fmt.Errorf("%w: %d of %d nodes no longer hold it for this token", driver.ErrNotHeld, notHeld, len(b.nodes))
	}
	return fmt.Errorf("redlock: %d of %d nodes renewed it, %d needed: %w", renewed, len(b.nodes), b.quorum, b.nodeErrors(errs))
}

// requestContext bounds ctx by the request timeout, unless its deadline is
// sooner already.
func (b *Backend) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= b.cfg.requestTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.cfg.requestTimeout)
}

// count returns how many of errs are nil and how many match
// driver.ErrNotHeld.
func count(errs []error) (ok, notHeld int) {
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, driver.ErrNotHeld):
			notHeld++
		}
	}
	return ok, notHeld
}

// Release frees key on every node at once where token holds it. It
// succeeds once token holds the key on no majority any more: some node
// released it and, with those where token did not hold it, they are a
// majority; a node that did not answer frees the key when its time to live
// runs out. If a majority said token does not hold it, and none released
// it, it returns an error matching driver.ErrNotHeld. Otherwise it returns
// the nodes' failures, and distlock's client tries again by token.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	if err := b.checkRequest(key, token, nil); err != nil {
		return err
	}
	// One deadline for all the nodes, rather than one timer per node.
	ctx, cancel := b.requestContext(ctx)
	defer cancel()
	errs := b.each(ctx, func(ctx context.Context, _ int, n *redislock.Backend) error {
		return n.Release(ctx, key, token)
	})
	released, notHeld := count(errs)
	switch {
	case released > 0 && released+notHeld >= b.quorum:
		return nil
	case released == 0 && notHeld >= b.quorum:
		return driver.ErrNotHeld
	}
	return fmt.Errorf("redlock: %d of %d nodes answered: %w", released+notHeld, len(b.nodes), b.nodeErrors(errs))
}

// Inspect asks every node about key. The key is held if a majority of the
// nodes hold it (the nodes do not say for which token); the fence is the
// largest the holding nodes report (any node's, if it is free), the TTL the
// time until fewer than a majority hold it, and the metadata the first
// holding node's. It fails, with the nodes' failures, unless a majority
// answered.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := b.checkRequest(key, "-", nil); err != nil {
		return driver.Info{}, err
	}
	infos := make([]driver.Info, len(b.nodes))
	errs := b.each(ctx, func(ctx context.Context, i int, n *redislock.Backend) (err error) {
		infos[i], err = n.Inspect(ctx, key)
		return err
	})
	if ok, _ := count(errs); ok < b.quorum {
		return driver.Info{}, fmt.Errorf("redlock: %d of %d nodes answered: %w", ok, len(b.nodes), b.nodeErrors(errs))
	}
	return b.merge(key, infos, errs), nil
}

// merge makes one view of key from the nodes' infos (those whose errs are
// nil), as Inspect describes.
func (b *Backend) merge(key string, infos []driver.Info, errs []error) driver.Info {
	out := driver.Info{Key: key}
	var ttls []time.Duration
	var last uint64
	for i, in := range infos {
		if errs[i] != nil {
			continue
		}
		last = max(last, in.Fence)
		if in.Held {
			if len(ttls) == 0 {
				out.Meta = in.Meta
			}
			ttls = append(ttls, in.TTL)
			out.Fence = max(out.Fence, in.Fence)
		}
	}
	if len(ttls) < b.quorum {
		return driver.Info{Key: key, Fence: last}
	}
	slices.SortFunc(ttls, func(x, y time.Duration) int { return int(y - x) })
	out.Held, out.TTL = true, ttls[b.quorum-1]
	return out
}

// ForceRelease frees key on every node whatever token holds it, for
// operators, and returns what the nodes knew of the hold, merged as
// Inspect merges it. It succeeds once no majority holds the key any more;
// if no node held it, it returns an error matching driver.ErrNotHeld.
// Otherwise it returns the nodes' failures.
func (b *Backend) ForceRelease(ctx context.Context, key string, opts driver.ForceOptions) (driver.Info, error) {
	if err := b.checkRequest(key, "-", nil); err != nil {
		return driver.Info{}, err
	}
	infos := make([]driver.Info, len(b.nodes))
	errs := b.each(ctx, func(ctx context.Context, i int, n *redislock.Backend) (err error) {
		infos[i], err = n.ForceRelease(ctx, key, opts)
		return err
	})
	freed, notHeld := count(errs)
	switch {
	case freed+notHeld < b.quorum:
		return driver.Info{}, fmt.Errorf("redlock: %d of %d nodes answered: %w", freed+notHeld, len(b.nodes), b.nodeErrors(errs))
	case freed == 0:
		return driver.Info{}, driver.ErrNotHeld
	}
	info := driver.Info{Key: key, Held: true}
	for i, in := range infos {
		if errs[i] == nil {
			if info.Fence == 0 {
				info.Meta = in.Meta
			}
			info.Fence, info.TTL = max(info.Fence, in.Fence), max(info.TTL, in.TTL)
		}
	}
	return info, nil
}

// List returns the locks whose keys start with prefix and that a majority
// of the nodes hold, sorted by key, each merged as Inspect merges it. It
// lists every node (redislock's List: a SCAN, then an inspection per key),
// and fails unless a majority answered.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	if b.closed.Load() {
		return nil, driver.ErrClosed
	}
	lists := make([][]driver.Info, len(b.nodes))
	errs := b.each(ctx, func(ctx context.Context, i int, n *redislock.Backend) (err error) {
		lists[i], err = n.List(ctx, prefix)
		return err
	})
	if ok, _ := count(errs); ok < b.quorum {
		return nil, fmt.Errorf("redlock: %d of %d nodes answered: %w", ok, len(b.nodes), b.nodeErrors(errs))
	}
	byKey := make(map[string][]driver.Info)
	for i, l := range lists {
		for _, in := range l {
			if byKey[in.Key] == nil {
				byKey[in.Key] = make([]driver.Info, len(b.nodes))
			}
			byKey[in.Key][i] = in
		}
	}
	var out []driver.Info
	for key, infos := range byKey {
		if info := b.merge(key, infos, errs); info.Held {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(x, y driver.Info) int { return strings.Compare(x.Key, y.Key) })
	return out, nil
}

// ListPage returns, sorted by key, at most limit of the locks List would
// return whose keys sort after after. It SCANs every node for the lock
// names of the prefix (redislock's Keys), fails unless a majority answered,
// and inspects the keys after after in order, each as Inspect does (every
// node, merged), until limit are held: an inspection per lock of the page,
// plus one per key that no majority holds, where List inspects every key
// of the prefix on every node. A key a majority holds has its name on at
// least one node of any majority, so the nodes that answered know it.
func (b *Backend) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	if b.closed.Load() {
		return nil, driver.ErrClosed
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d, want at least 1", driver.ErrInvalidOption, limit)
	}
	names := make([][]string, len(b.nodes))
	errs := b.each(ctx, func(ctx context.Context, i int, n *redislock.Backend) (err error) {
		names[i], err = n.Keys(ctx, prefix)
		return err
	})
	if ok, _ := count(errs); ok < b.quorum {
		return nil, fmt.Errorf("redlock: %d of %d nodes answered: %w", ok, len(b.nodes), b.nodeErrors(errs))
	}
	var keys []string
	for _, ks := range names {
		for _, k := range ks {
			if k > after {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	out := make([]driver.Info, 0, min(len(keys), limit))
	for _, key := range keys {
		if len(out) == limit {
			break
		}
		info, err := b.Inspect(ctx, key)
		if err != nil {
			return nil, err
		}
		if info.Held {
			out = append(out, info)
		}
	}
	return out, nil
}

// Close closes every node's backend, and the clients if Open built them;
// clients passed to New and NewRueidis stay open. It returns once the
// requests in flight to the nodes ended, each within the request timeout.
// Every call after Close returns an error matching driver.ErrClosed.
// Closing twice is harmless.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	errs := make([]error, len(b.nodes))
	for i, n := range b.nodes {
		errs[i] = n.b.Close()
	}
	b.work.close()
	if err := b.nodeErrors(errs); err != nil {
		return fmt.Errorf("redlock: close: %w", err)
	}
	return nil
}
