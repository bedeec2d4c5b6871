package zklock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

var acl = zk.WorldACL(zk.PermAll)

// Acquire takes req.Key if its queue is empty: it queues, and leaves again
// at once if anyone is ahead.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Grant{}, driver.Wrap("zklock", err)
	}
	defer stop()
	data := encodeValue(req.Token, req.TTL, req.Meta)
	sent := time.Now()
	pos, err := b.enqueue(ctx, req.Key, req.Token, data)
	if err != nil {
		return driver.Grant{}, driver.Wrap("zklock", err)
	}
	if !pos.first() {
		pos, err = b.look(ctx, pos.node, pos.fence)
	}
	if err == nil && pos.first() {
		g, err := b.granted(req, pos.node, data, pos, sent, false)
		if err != nil {
			return driver.Grant{}, driver.Wrap("zklock", err)
		}
		return g, nil
	}
	b.leave(pos.node)
	if err != nil {
		return driver.Grant{}, driver.Wrap("zklock", err)
	}
	return driver.Grant{}, driver.ErrNotAcquired
}

// AcquireWait queues for req.Key and returns once its node is first. It
// watches only the node just before its own, and when that node holds the
// lock, enforces its lease. A node of its own that vanishes while it waits
// (an operator deleted it, its session expired and go-zookeeper made a new
// one) is created again, at the tail of the queue, and the wait goes on; so
// do waits through a dropped connection. When ctx ends it deletes its node
// and returns an error matching driver.ErrNotAcquired; when the backend
// closes, one matching driver.ErrClosed.
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Grant{}, driver.Wrap("zklock", err)
	}
	defer stop()
	w := &waiter{b: b, req: req, data: encodeValue(req.Token, req.TTL, req.Meta)}
	return w.run(ctx)
}

// waiter is one AcquireWait.
type waiter struct {
	b     *Backend
	req   driver.AcquireRequest
	data  []byte
	node  string // its queue node, once known
	fence uint64 // the node's czxid, once known
	// unsure is set when a create failed without a clear answer: the node
	// may exist, and is looked for by token before another is created.
	unsure bool
}

// Errors that send a waiter round again.
var (
	// errNodeGone: the waiter's node is not in its queue (any more).
	errNodeGone = errors.New("queue node gone")
	// errOwnChanged: the watch on the waiter's own node fired; look again.
	errOwnChanged = errors.New("queue node changed")
)

// run waits until the waiter's node is first, queueing again as long as ctx
// allows when the node vanishes or the store fails for a while.
func (w *waiter) run(ctx context.Context) (driver.Grant, error) {
	sent := time.Now()
	pause := retryPause{next: 50 * time.Millisecond}
	var last error
	for {
		pos, waited, err := w.attempt(ctx)
		switch {
		case err == nil:
			return w.grant(pos, waited, sent)
		case ctx.Err() != nil:
			return driver.Grant{}, w.fail(ctx, last)
		case errors.Is(err, errNodeGone):
			w.node = ""
			last = err
		case errors.Is(err, errOwnChanged):
		case transient(err):
			last = err
			if pause.wait(ctx) != nil {
				return driver.Grant{}, w.fail(ctx, last)
			}
		default:
			w.leave()
			return driver.Grant{}, driver.Wrap("zklock", err)
		}
	}
}

// attempt finds or creates the waiter's node and waits until it is first.
func (w *waiter) attempt(ctx context.Context) (position, bool, error) {
	b := w.b
	if w.node == "" && w.unsure {
		node, err := b.findNode(ctx, w.req.Key, w.req.Token)
		if err != nil {
			return position{}, false, err
		}
		w.node, w.fence, w.unsure = node, 0, false
	}
	pos := position{idx: -1} // not known to be first
	var err error
	if w.node == "" {
		pos, err = b.enqueue(ctx, w.req.Key, w.req.Token, w.data)
		w.node, w.fence, w.unsure = pos.node, pos.fence, err != nil && transient(err)
	}
	if err == nil && !pos.first() {
		pos, err = b.look(ctx, w.node, w.fence)
	}
	if err == nil && !pos.first() {
		err = b.readFence(ctx, &pos) // while waiting, off the handoff's path
		w.fence = pos.fence
	}
	waited := false
	for err == nil && !pos.first() {
		waited = true
		err = b.awaitPred(ctx, &pos)
	}
	return pos, waited, err
}

// grant records the hold. A hold granted after a wait is touched (its node
// rewritten) once it lasts a little while: see watchHold.
func (w *waiter) grant(pos position, waited bool, sent time.Time) (driver.Grant, error) {
	b, node := w.b, w.node
	if waited {
		sent = time.Now()
	}
	g, err := b.granted(w.req, node, w.data, pos, sent, waited)
	if err != nil {
		w.leave()
		return driver.Grant{}, driver.Wrap("zklock", err)
	}
	return g, nil
}

// fail ends a wait whose context ended: ErrClosed if the backend closed,
// else ErrNotAcquired joined with the context's error and the last store
// error, if any.
func (w *waiter) fail(ctx context.Context, last error) error {
	w.leave()
	if errors.Is(context.Cause(ctx), driver.ErrClosed) {
		return driver.ErrClosed
	}
	return errors.Join(driver.ErrNotAcquired, ctx.Err(), driver.Wrap("zklock", last))
}

// leave deletes the waiter's node, if it has one.
func (w *waiter) leave() {
	if w.node != "" {
		w.b.leave(w.node)
	}
}

// retryPause is a capped, jittered exponential pause between attempts
// through a store failure.
type retryPause struct{ next time.Duration }

// wait pauses, or returns ctx's error if it ends first.
func (p *retryPause) wait(ctx context.Context) error {
	d := p.next/2 + rand.N(p.next/2+1)
	p.next = min(2*p.next, time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// position is a node's place in its queue.
type position struct {
	node, parent string
	queue        []string // children names, by sequence
	idx          int
	parentStat   *zk.Stat // as of the listing
	fence        uint64   // the node's czxid, once known
}

func (p *position) first() bool { return p.idx == 0 }

// enqueue creates token's node at the tail of key's queue, creating the
// parent (as a container) and the root when they are missing. The returned
// position is complete (first, with its fence) when the node is alone in
// the queue; otherwise only its node is known and first reports false.
func (b *Backend) enqueue(ctx context.Context, key, token string, data []byte) (position, error) {
	parent := b.parent(key)
	for range 3 {
		pos, err := b.createNode(ctx, parent, nodeName(token), data)
		if !errors.Is(err, zk.ErrNoNode) {
			return pos, err
		}
		if err := b.createParent(ctx, parent); err != nil {
			return position{}, err
		}
	}
	return position{}, fmt.Errorf("parent %s keeps being deleted", parent)
}

// createParent creates a key's parent, and the root first if it is missing.
func (b *Backend) createParent(ctx context.Context, parent string) error {
	create := func() (string, error) { return b.conn.CreateContainer(parent, nil, zk.FlagContainer, acl) }
	_, err := call(ctx, b, create, nil)
	if errors.Is(err, zk.ErrNoNode) {
		if err := b.ensure(ctx, b.root); err != nil {
			return fmt.Errorf("create root %s: %w", b.root, err)
		}
		_, err = call(ctx, b, create, nil)
	}
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create parent %s: %w", parent, err)
	}
	return nil
}

// createNode creates an ephemeral sequential node under parent. It does so in
// one transaction with an empty write to the parent, whose stat comes back
// with the answer: its child count tells whether the node is alone, and its
// mzxid is the transaction's zxid, which is the node's czxid (the fence),
// whether the node is alone or not. An uncontended lock thus costs one
// request, like the create alone, and a contended one never reads its fence. If ctx ends
// or the request times out first, the node, should it be created after all,
// is deleted in the background.
func (b *Backend) createNode(ctx context.Context, parent, name string, data []byte) (position, error) {
	create := func() (position, error) {
		rs, err := b.conn.Multi(
			&zk.CreateRequest{Path: parent + "/" + name, Data: data, Acl: acl, Flags: zk.FlagEphemeralSequential},
			&zk.SetDataRequest{Path: parent, Version: -1},
		)
		if err == nil && len(rs) != 2 {
			err = fmt.Errorf("create %s: %d results for 2 operations", name, len(rs))
		}
		for _, r := range rs {
			err = cmp.Or(err, r.Error)
		}
		if err != nil {
			return position{}, err
		}
		pos := position{node: rs[0].String, parent: parent, idx: -1}
		if st := rs[1].Stat; st != nil {
			pos.fence = uint64(st.Mzxid)
			if st.NumChildren == 1 {
				pos.queue, pos.idx, pos.parentStat = []string{path.Base(pos.node)}, 0, st
			}
		}
		return pos, nil
	}
	return call(ctx, b, create, func(ctx context.Context, pos position) { _ = b.deleteNode(ctx, pos.node, -1) })
}

// findNode returns token's node in key's queue, or "" if it has none.
func (b *Backend) findNode(ctx context.Context, key, token string) (string, error) {
	parent := b.parent(key)
	children, err := call(ctx, b, func() ([]string, error) {
		c, _, err := b.conn.Children(parent)
		return c, err
	}, nil)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return "", nil
	case err != nil:
		return "", err
	}
	if name := findToken(children, token); name != "" {
		return parent + "/" + name, nil
	}
	return "", nil
}

// look lists node's queue and, if node is first, finds its czxid unless
// fence, when not 0, is it.
func (b *Backend) look(ctx context.Context, node string, fence uint64) (position, error) {
	pos := position{node: node, parent: path.Dir(node), fence: fence}
	if err := b.list(ctx, &pos); err != nil || !pos.first() {
		return pos, err
	}
	return pos, b.readFence(ctx, &pos)
}

// readFence sets pos.fence to the node's czxid. When the parent's children
// have not changed since the node was created (its cversion is the node's
// sequence number plus one: creates and deletes each add one), the parent's
// pzxid is that czxid and the listing already told it.
func (b *Backend) readFence(ctx context.Context, pos *position) error {
	if pos.fence != 0 {
		return nil
	}
	name := path.Base(pos.node)
	seq, err := strconv.ParseInt(name[len(name)-seqLen:], 10, 32)
	if err == nil && pos.parentStat != nil && int64(pos.parentStat.Cversion) == seq+1 {
		pos.fence = uint64(pos.parentStat.Pzxid)
		return nil
	}
	st, err := call(ctx, b, func() (*zk.Stat, error) {
		exists, st, err := b.conn.Exists(pos.node)
		if err == nil && !exists {
			err = errNodeGone
		}
		return st, err
	}, nil)
	if err != nil {
		return err
	}
	pos.fence = uint64(st.Czxid)
	return nil
}

// list reads the queue and finds the node in it.
func (b *Backend) list(ctx context.Context, pos *position) error {
	type listing struct {
		children []string
		stat     *zk.Stat
	}
	l, err := call(ctx, b, func() (listing, error) {
		c, st, err := b.conn.Children(pos.parent)
		return listing{c, st}, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return errNodeGone // and the parent with it
	}
	if err != nil {
		return err
	}
	pos.queue, pos.parentStat = sortQueue(l.children), l.stat
	pos.idx = slices.Index(pos.queue, path.Base(pos.node))
	if pos.idx < 0 {
		return errNodeGone
	}
	return nil
}

// watched is the answer to a request that sets a watch.
type watched struct {
	exists bool
	raw    []byte
	stat   *zk.Stat
	ch     <-chan zk.Event
}

// awaitPred waits until the node before pos's is gone and updates pos.
func (b *Backend) awaitPred(ctx context.Context, pos *position) error {
	pred := pos.parent + "/" + pos.queue[pos.idx-1]
	if pos.idx == 1 {
		own, err := b.watchOwn(ctx, pos.node)
		if err != nil {
			return err
		}
		if err := b.awaitHolder(ctx, pred, own); err != nil {
			return err
		}
		pos.idx = 0 // nothing was ahead of the holder, and nothing can queue ahead of us
		return nil
	}
	// Further back, it waits for the predecessor to go or to be written (a
	// holder granted after a wait touches its node, and renews), then lists
	// the queue again. Should the predecessor have become the holder and
	// hung before touching its node, a look once per its lease finds that
	// this waiter is now next, and starts timing the holder's lease.
	w, err := call(ctx, b, func() (watched, error) {
		raw, _, ch, err := b.conn.GetW(pred)
		return watched{exists: err == nil, raw: raw, ch: ch}, err
	}, nil)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	if w.exists {
		recheck := time.Minute
		if v, err := decodeValue(pred, w.raw); err == nil && v.ttl() > 0 {
			recheck = v.ttl()
		}
		t := time.NewTimer(recheck)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case ev := <-w.ch:
			if ev.Err != nil {
				return ev.Err
			}
		case <-t.C:
		}
	}
	return b.list(ctx, pos)
}

// watchOwn watches the waiter's own node, so that a grant without a read
// after the holder's deletion can tell that the node is still there:
// ZooKeeper sends a client its watch events in the order of the changes, so
// a deletion of the own node before the holder's arrives first.
func (b *Backend) watchOwn(ctx context.Context, node string) (<-chan zk.Event, error) {
	w, err := call(ctx, b, func() (watched, error) {
		exists, _, ch, err := b.conn.ExistsW(node)
		return watched{exists: exists, ch: ch}, err
	}, nil)
	switch {
	case err != nil:
		return nil, err
	case !w.exists:
		return nil, errNodeGone
	}
	return w.ch, nil
}

// ownIntact reports whether the watch on the own node is still quiet.
func ownIntact(own <-chan zk.Event) error {
	select {
	case ev := <-own:
		return ownEvent(ev)
	default:
		return nil
	}
}

// ownEvent is the error for an event on the own node's watch.
func ownEvent(ev zk.Event) error {
	switch {
	case ev.Err != nil:
		return ev.Err
	case ev.Type == zk.EventNodeDeleted:
		return errNodeGone
	}
	return errOwnChanged
}

// awaitHolder waits until the holder's node is gone, as long as the own node
// stays. It times the holder's lease from each change of its node it sees;
// a lease that runs out without a renewal ends with the deletion of the
// node, by version, so that a renewal in between wins.
func (b *Backend) awaitHolder(ctx context.Context, holder string, own <-chan zk.Event) error {
	for {
		w, err := call(ctx, b, func() (watched, error) {
			raw, st, ch, err := b.conn.GetW(holder)
			return watched{exists: err == nil, raw: raw, stat: st, ch: ch}, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			return ownIntact(own)
		}
		if err != nil {
			return err
		}
		v, err := decodeValue(holder, w.raw)
		if err != nil {
			return err
		}
		gone, err := b.holderGone(ctx, holder, w, v.ttl(), own)
		if gone || err != nil {
			return err
		}
	}
}

// holderGone waits for one change of the holder's node, the own node's
// vanishing, or the end of the holder's lease, and reports whether the
// holder is gone with the own node intact.
func (b *Backend) holderGone(ctx context.Context, holder string, w watched, ttl time.Duration, own <-chan zk.Event) (bool, error) {
	expire := time.NewTimer(ttl)
	defer expire.Stop()
	select {
	case <-ctx.Done():
		return false, context.Cause(ctx)
	case ev := <-own:
		return false, ownEvent(ev)
	case ev := <-w.ch:
		switch {
		case ev.Err != nil:
			return false, ev.Err
		case ev.Type == zk.EventNodeDeleted:
			return true, ownIntact(own)
		}
		return false, nil
	case <-expire.C:
		err := b.deleteNode(ctx, holder, w.stat.Version)
		switch {
		case err == nil, errors.Is(err, zk.ErrNoNode):
			return true, ownIntact(own)
		case errors.Is(err, zk.ErrBadVersion):
			return false, nil
		}
		return false, err
	}
}

// leave deletes a node that will not hold the lock before returning, with a
// context of its own since the caller's has often ended, and lets the
// janitor look at its parent. Failing that, the node goes with the session.
func (b *Backend) leave(node string) {
	ctx, cancel := context.WithTimeout(context.Background(), b.requestTimeout)
	defer cancel()
	if err := b.deleteNode(ctx, node, -1); err == nil {
		b.janitor.mark(path.Dir(node))
	}
}

// granted records a hold and watches its node. A backend closed meanwhile
// grants nothing.
func (b *Backend) granted(req driver.AcquireRequest, node string, data []byte, pos position, sent time.Time, touch bool) (driver.Grant, error) {
	h := newHold(req, node, data)
	h.touch, h.fence = touch, pos.fence
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return driver.Grant{}, driver.ErrClosed
	}
	b.holds[req.Token] = h
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		b.watchHold(h)
	}()
	return driver.Grant{Fence: pos.fence, Lost: h.lost, Sent: sent}, nil
}

// deleteNode deletes a node at version (-1: any).
func (b *Backend) deleteNode(ctx context.Context, node string, version int32) error {
	_, err := call(ctx, b, func() (struct{}, error) { return struct{}{}, b.conn.Delete(node, version) }, nil)
	return err
}

// ensure creates node and its missing ancestors as persistent nodes.
func (b *Backend) ensure(ctx context.Context, node string) error {
	for i := 1; i <= len(node); i++ {
		if i < len(node) && node[i] != '/' {
			continue
		}
		p := node[:i]
		_, err := call(ctx, b, func() (string, error) { return b.conn.Create(p, nil, zk.FlagPersistent, acl) }, nil)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}
