package zklock

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Semaphores      = (*Backend)(nil)
	_ driver.WeightedPermits = (*Backend)(nil)
)

// A semaphore S lives under ROOT/sem.b64(S), a container no lock's parent
// can be ('.' is not in the base64url alphabet). Its child "limit" is a
// persistent node holding the limit in decimal; each hold is an ephemeral
// sequential child named as a lock's queue node. An attempt creates its
// node and holds if its node is among the first limit by sequence, as in
// Curator's InterProcessSemaphoreV2; else it deletes it. Holds of several
// permits and the intents of the requests that wait are in
// semaphore_weighted.go.

// semPath returns the node under which name's permits live.
func (b *Backend) semPath(name string) string {
	return b.root + "/sem." + base64.RawURLEncoding.EncodeToString([]byte(name))
}

const limitNode = "limit"

// storedLimit is a semaphore's limit, the version of its node, and whether
// the semaphore takes weighted holds (semaphore_weighted.go).
type storedLimit struct {
	n        int
	version  int32
	weighted bool
}

// AcquirePermit takes a permit of req.Key: AcquirePermits of one permit.
func (b *Backend) AcquirePermit(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	req.Permits = 1
	return b.AcquirePermits(ctx, req, limit)
}

// AcquirePermits makes one attempt to take req.Permits permits of req.Key
// as one hold. An attempt without an intent creates its node in one
// transaction with a check that the limit node is at the version this
// backend last read, and an empty write to the parent, whose stat tells
// the number of nodes with the new one and, as its mzxid, the node's
// czxid: the fence. So a permit taken while fewer than the limit are held
// costs one request, like a lock, on a semaphore that never took a
// weighted hold, and one taken alone on any; else the attempt lists the
// queue, decides (see fits), times the leases of those ahead that refuse
// it (see expire), and deletes its node if refused. An attempt with an
// intent decides on a listing first (see claimPermits).
func (b *Backend) AcquirePermits(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	n := max(req.Permits, 1)
	switch {
	case limit < 1:
		return driver.Grant{}, fmt.Errorf("%w: %d permits: want at least 1", driver.ErrInvalidOption, limit)
	case n > limit:
		return driver.Grant{}, fmt.Errorf("%w: %d permits in one hold, over the %d of the semaphore", driver.ErrInvalidOption, n, limit)
	}
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Grant{}, driver.Wrap("zklock", err)
	}
	defer stop()
	g, err := b.acquirePermits(ctx, req, n, limit)
	if err != nil {
		return driver.Grant{}, driver.Wrap("zklock", err)
	}
	return g, nil
}

func (b *Backend) acquirePermits(ctx context.Context, req driver.AcquireRequest, n, limit int) (driver.Grant, error) {
	st, err := b.state()
	if err != nil {
		return driver.Grant{}, err
	}
	sp := b.semPath(req.Key)
	if g, again, err := b.permitAgain(ctx, sp, req); again {
		return g, err
	}
	v := value{Token: req.Token, TTLMs: req.TTL.Milliseconds(), Meta: req.Meta}
	if n > 1 {
		v.Permits = n
	}
	data := v.encode()
	sent := time.Now()
	for range 3 { // the limit may change between its read and the create
		lim, err := b.limitOf(ctx, st, sp, limit)
		if err != nil {
			return driver.Grant{}, err
		}
		if lim.n != limit {
			return driver.Grant{}, fmt.Errorf("%w: the semaphore has %d permits, not %d", driver.ErrInvalidOption, lim.n, limit)
		}
		if (n > 1 || req.Intent != "") && !lim.weighted {
			if lim, err = b.markWeighted(ctx, sp, lim); err != nil {
				if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode) {
					st.forgetLimit(sp)
					continue
				}
				return driver.Grant{}, err
			}
			st.rememberLimit(sp, lim)
		}
		var g driver.Grant
		if req.Intent != "" {
			g, err = b.claimPermits(ctx, st, sp, lim, req, n, data, sent)
		} else {
			g, err = b.tryPermits(ctx, st, sp, lim, req, n, data, sent)
		}
		if errors.Is(err, errLimitChanged) {
			st.forgetLimit(sp)
			continue
		}
		return g, err
	}
	return driver.Grant{}, errors.New("the limit kept changing")
}

// errLimitChanged: the limit node is not at the version an attempt read.
var errLimitChanged = errors.New("limit changed")

// tryPermits makes the attempt of a request without an intent: it creates
// its node, which holds if it is alone, or among the first limit on a
// semaphore that never took a weighted hold (every node then counts one
// permit, and none is an intent), or else if it fits behind the nodes
// ahead of it (see fits) and no node named with its count is behind it
// (see semaphore_weighted.go).
func (b *Backend) tryPermits(ctx context.Context, st *syncState, sp string, lim storedLimit, req driver.AcquireRequest, n int, data []byte, sent time.Time) (driver.Grant, error) {
	name := nodeName(req.Token)
	if n > 1 {
		name = weightedName(req.Token, n)
	}
	pos, count, err := b.createPermit(ctx, sp, lim, name, data)
	if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
		return driver.Grant{}, errLimitChanged
	}
	if err != nil {
		return driver.Grant{}, err
	}
	f := fit{ok: count == 1 || !lim.weighted && count <= lim.n}
	if !f.ok {
		if err = b.list(ctx, &pos); err == nil {
			st.keep(sp, pos.queue)
			f, err = b.fitListed(ctx, st, &pos, lim.n, n)
		}
	}
	if err == nil && f.ok {
		return b.granted(req, pos.node, data, pos, sent, false)
	}
	b.leave(pos.node)
	if err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{}, f.refused(lim.n, n)
}

// fitListed decides the attempt at n permits whose node is pos, on pos's
// listing: it is refused if a node named with its count is behind it, and
// else holds if it fits behind the nodes ahead of it (see fits). Intents
// ahead that are gone by the time fits reads them may each have become a
// hold behind the node, which the listing lacks (claim): the attempt then
// lists again and decides on that. New intents are created at the tail,
// so the second listing has none ahead.
func (b *Backend) fitListed(ctx context.Context, st *syncState, pos *position, limit, n int) (fit, error) {
	f, intents, err := b.fitOn(ctx, st, pos, limit, n)
	if err != nil || !f.ok || intents == 0 {
		return f, err
	}
	if err := b.list(ctx, pos); err != nil {
		return fit{}, err
	}
	st.keep(pos.parent, pos.queue)
	f, _, err = b.fitOn(ctx, st, pos, limit, n)
	return f, err
}

// fitOn is fitListed's decision on one listing; it also returns the number
// of intents the listing had ahead of the node.
func (b *Backend) fitOn(ctx context.Context, st *syncState, pos *position, limit, n int) (fit, int, error) {
	if slices.ContainsFunc(pos.queue[pos.idx+1:], func(c string) bool { return parseSemNode(c).weighted }) {
		return fit{later: true}, 0, nil // a waiting request's hold, maybe, which did not count this node
	}
	intents, holds := splitQueue(pos.queue[:pos.idx])
	f, err := b.fits(ctx, st, pos.parent, intents, holds, limit, n)
	return f, len(intents), err
}

// createPermit creates the permit node name (before its sequence) under sp
// if the limit node is still at lim's version, and returns its position
// (node, fence) and the number of nodes with it.
func (b *Backend) createPermit(ctx context.Context, sp string, lim storedLimit, name string, data []byte) (position, int, error) {
	type created struct {
		pos   position
		count int
	}
	c, err := call(ctx, b, func() (created, error) {
		rs, err := b.conn.Multi(
			&zk.CheckVersionRequest{Path: sp + "/" + limitNode, Version: lim.version},
			&zk.CreateRequest{Path: sp + "/" + name, Data: data, Acl: acl, Flags: zk.FlagEphemeralSequential},
			&zk.SetDataRequest{Path: sp, Version: -1},
		)
		if err == nil && (len(rs) != 3 || rs[2].Stat == nil) {
			err = fmt.Errorf("create permit: %d results for 3 operations", len(rs))
		}
		if err != nil {
			return created{}, err
		}
		st := rs[2].Stat
		return created{position{node: rs[1].String, parent: sp, idx: -1, fence: uint64(st.Mzxid)}, int(st.NumChildren) - 1}, nil
	}, func(ctx context.Context, c created) { _ = b.deleteNode(ctx, c.pos.node, -1) })
	return c.pos, c.count, err
}

// limitOf returns sp's stored limit: as this backend knows it, else read,
// else stored as want if the semaphore has none.
func (b *Backend) limitOf(ctx context.Context, st *syncState, sp string, want int) (storedLimit, error) {
	st.mu.Lock()
	lim, ok := st.limits[sp]
	st.mu.Unlock()
	if ok && lim.n == want {
		return lim, nil
	}
	for range 3 { // the node may be created or deleted between the calls
		lim, err := b.readLimit(ctx, sp)
		if errors.Is(err, zk.ErrNoNode) {
			lim, err = b.createLimit(ctx, sp, want)
			if errors.Is(err, zk.ErrNodeExists) {
				continue
			}
		}
		if err != nil {
			return storedLimit{}, err
		}
		st.rememberLimit(sp, lim)
		return lim, nil
	}
	return storedLimit{}, errors.New("the limit node kept changing")
}

// readLimit reads sp's limit node; a child of it marks a semaphore that
// takes weighted holds (see markWeighted).
func (b *Backend) readLimit(ctx context.Context, sp string) (storedLimit, error) {
	node := sp + "/" + limitNode
	w, err := call(ctx, b, func() (watched, error) {
		raw, stat, err := b.conn.Get(node)
		return watched{raw: raw, stat: stat}, err
	}, nil)
	if err != nil {
		return storedLimit{}, err
	}
	n, err := strconv.Atoi(string(w.raw))
	if err != nil || n < 1 {
		return storedLimit{}, fmt.Errorf("%s: %q is not a number of permits", node, w.raw)
	}
	return storedLimit{n: n, version: w.stat.Version, weighted: w.stat.NumChildren > 0}, nil
}

// createLimit creates sp, if missing, and its limit node holding n.
func (b *Backend) createLimit(ctx context.Context, sp string, n int) (storedLimit, error) {
	create := func() (struct{}, error) {
		_, err := b.conn.Create(sp+"/"+limitNode, []byte(strconv.Itoa(n)), zk.FlagPersistent, acl)
		return struct{}{}, err
	}
	_, err := call(ctx, b, create, nil)
	if errors.Is(err, zk.ErrNoNode) {
		if err := b.createParent(ctx, sp); err != nil {
			return storedLimit{}, err
		}
		_, err = call(ctx, b, create, nil)
	}
	return storedLimit{n: n}, err
}

// forgetLimit drops what st knows of sp's limit.
func (s *syncState) forgetLimit(sp string) {
	s.mu.Lock()
	delete(s.limits, sp)
	s.mu.Unlock()
}

// rememberLimit records sp's limit.
func (s *syncState) rememberLimit(sp string, lim storedLimit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.limits) >= maxRemembered {
		clear(s.limits)
	}
	s.limits[sp] = lim
}

// RenewPermit rewrites token's permit node (see Renew).
func (b *Backend) RenewPermit(ctx context.Context, name, token string, ttl time.Duration) error {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Wrap("zklock", err)
	}
	defer stop()
	if err := b.renewIn(ctx, b.semPath(name), token, ttl, token); err != nil {
		return driver.Wrap("zklock", err)
	}
	return nil
}

// ReleasePermit deletes token's permit node, which wakes the waiters'
// watches. The semaphore's node and its limit stay.
func (b *Backend) ReleasePermit(ctx context.Context, name, token string) error {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Wrap("zklock", err)
	}
	defer stop()
	if err := b.releaseIn(ctx, b.semPath(name), token, false, token); err != nil {
		return driver.Wrap("zklock", err)
	}
	return nil
}

// SetPermits writes n to name's limit node, creating it if missing. Every
// backend's next attempt then reads it again, its check of the version
// failing.
func (b *Backend) SetPermits(ctx context.Context, name string, n int) error {
	if n < 1 {
		return fmt.Errorf("%w: %d permits: want at least 1", driver.ErrInvalidOption, n)
	}
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Wrap("zklock", err)
	}
	defer stop()
	if err := b.setPermits(ctx, name, n); err != nil {
		return driver.Wrap("zklock", err)
	}
	return nil
}

func (b *Backend) setPermits(ctx context.Context, name string, n int) error {
	st, err := b.state()
	if err != nil {
		return err
	}
	sp := b.semPath(name)
	data := []byte(strconv.Itoa(n))
	for range 3 { // the node may be created or deleted between the calls
		stat, err := call(ctx, b, func() (*zk.Stat, error) { return b.conn.Set(sp+"/"+limitNode, data, -1) }, nil)
		if err == nil {
			st.rememberLimit(sp, storedLimit{n: n, version: stat.Version, weighted: stat.NumChildren > 0})
			return nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		lim, err := b.createLimit(ctx, sp, n)
		if err == nil {
			st.rememberLimit(sp, lim)
			return nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return errors.New("the limit node kept changing")
}

// InspectPermits returns name's stored limit and its holds' nodes, by
// fence, each with the permits it counts, leaving out the intents of the
// requests that wait; an attempt about to be refused may show for a moment.
func (b *Backend) InspectPermits(ctx context.Context, name string) (int, []driver.Info, error) {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return 0, nil, driver.Wrap("zklock", err)
	}
	defer stop()
	sp := b.semPath(name)
	lim, err := b.readLimit(ctx, sp)
	if errors.Is(err, zk.ErrNoNode) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, driver.Wrap("zklock", err)
	}
	held, err := b.nodesInfo(ctx, name, sp, func(_ context.Context, queue []string) ([]string, error) {
		_, holds := splitQueue(queue)
		return holds, nil
	})
	if err != nil {
		return 0, nil, driver.Wrap("zklock", err)
	}
	for i := range held {
		held[i].Permits = max(held[i].Permits, 1)
	}
	return lim.n, held, nil
}

// nodesInfo describes the nodes that pick takes of the queue under parent
// (by sequence). A node gone between the listing and its read is left out.
func (b *Backend) nodesInfo(ctx context.Context, key, parent string, pick func(ctx context.Context, queue []string) ([]string, error)) ([]driver.Info, error) {
	children, err := call(ctx, b, func() ([]string, error) {
		c, _, err := b.conn.Children(parent)
		return c, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	picked, err := pick(ctx, sortQueue(children))
	if err != nil {
		return nil, err
	}
	var out []driver.Info
	for _, c := range picked {
		node := parent + "/" + c
		w, err := call(ctx, b, func() (watched, error) {
			raw, st, err := b.conn.Get(node)
			return watched{raw: raw, stat: st}, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		v, err := decodeValue(node, w.raw)
		if err != nil {
			return nil, err
		}
		out = append(out, holding{node: node, val: v, stat: w.stat}.info(key))
	}
	return out, nil
}

// WatchPermits fires wake when a node of name's queue that may hold (see
// semCounted) is released or expired, an intent of a request that waits
// goes (granted, withdrawn, expired), or the limit changes.
func (b *Backend) WatchPermits(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	sp := b.semPath(name)
	wake, stop, err := b.watchQueue(ctx, func(ctx context.Context) (*queueWatch, error) {
		w, err := b.armWatches(ctx, sp, sp+"/"+limitNode)
		if err == nil {
			w.counted = semCounted(w.queue, w.limit)
		}
		return w, err
	})
	if err != nil {
		return nil, nil, driver.Wrap("zklock", err)
	}
	return wake, stop, nil
}
