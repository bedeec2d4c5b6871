package zklock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
	data := encodeValue(req.Token, req.TTL, req.Meta)
	sent := time.Now()
	pos, err := b.enqueue(ctx, req.Key, req.Token, data)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("zklock: acquire %q: %w", req.Key, err)
	}
	if !pos.first() {
		pos, err = b.look(ctx, pos.node)
	}
	if err == nil && pos.first() {
		return b.granted(req.Token, pos.node, data, pos, sent), nil
	}
	b.leave(pos.node)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("zklock: acquire %q: %w", req.Key, err)
	}
	return driver.Grant{}, fmt.Errorf("zklock: acquire %q: %w", req.Key, driver.ErrNotAcquired)
}

// AcquireWait queues for req.Key and returns once its node is first. It
// watches only the node just before its own, and when that node holds the
// lock, enforces its lease. If ctx ends it deletes its node.
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	data := encodeValue(req.Token, req.TTL, req.Meta)
	sent := time.Now()
	pos, err := b.enqueue(ctx, req.Key, req.Token, data)
	if err != nil {
		return driver.Grant{}, b.waitError(ctx, req.Key, err)
	}
	node := pos.node
	if !pos.first() {
		pos, err = b.look(ctx, node)
		if err == nil && !pos.first() {
			err = b.readFence(ctx, &pos) // while waiting, off the handoff's path
		}
	}
	waited := false
	for err == nil && !pos.first() {
		waited = true
		err = b.awaitPred(ctx, &pos)
	}
	if err != nil {
		b.leave(node)
		return driver.Grant{}, b.waitError(ctx, req.Key, err)
	}
	if waited {
		// Whoever queued behind this node while it waited watches it without
		// timing its lease; touching the node makes them look again and start.
		sent = time.Now()
		b.background(func(ctx context.Context) {
			_, _ = call(ctx, func() (*zk.Stat, error) { return b.conn.Set(node, data, -1) })
		})
	}
	return b.granted(req.Token, node, data, pos, sent), nil
}

func (b *Backend) waitError(ctx context.Context, key string, err error) error {
	if ctx.Err() != nil {
		return errors.Join(fmt.Errorf("zklock: lock %q: %w", key, driver.ErrNotAcquired), ctx.Err())
	}
	return fmt.Errorf("zklock: lock %q: %w", key, err)
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
// parent (as a container) when it is missing. The returned position is
// complete (first, with its fence) when the node is alone in the queue;
// otherwise only its node is known and first reports false.
func (b *Backend) enqueue(ctx context.Context, key, token string, data []byte) (position, error) {
	parent := b.parent(key)
	for range 3 {
		pos, err := b.createNode(ctx, parent, nodeName(token), data)
		if !errors.Is(err, zk.ErrNoNode) {
			return pos, err
		}
		_, err = call(ctx, func() (string, error) { return b.conn.CreateContainer(parent, nil, zk.FlagContainer, acl) })
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return position{}, fmt.Errorf("create parent %s: %w", parent, err)
		}
	}
	return position{}, fmt.Errorf("parent %s keeps being deleted", parent)
}

// createNode creates an ephemeral sequential node under parent. It does so in
// one transaction with an empty write to the parent, whose stat comes back
// with the answer: its child count tells whether the node is alone, and its
// mzxid is the transaction's zxid, which is the node's czxid (the fence). An
// uncontended lock thus costs one request, like the create alone. If ctx ends
// first, the node, should it be created after all, is deleted in the
// background.
func (b *Backend) createNode(ctx context.Context, parent, name string, data []byte) (position, error) {
	type result struct {
		pos position
		err error
	}
	ch := make(chan result, 1)
	go func() {
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
			ch <- result{err: err}
			return
		}
		pos := position{node: rs[0].String, parent: parent, idx: -1}
		if st := rs[1].Stat; st != nil && st.NumChildren == 1 {
			pos.queue, pos.idx, pos.parentStat, pos.fence = []string{path.Base(pos.node)}, 0, st, uint64(st.Mzxid)
		}
		ch <- result{pos: pos}
	}()
	select {
	case r := <-ch:
		return r.pos, r.err
	case <-ctx.Done():
		b.background(func(ctx context.Context) {
			if r := <-ch; r.err == nil {
				_ = b.deleteNode(ctx, r.pos.node, -1)
			}
		})
		return position{}, ctx.Err()
	}
}

// look lists node's queue and, if node is first, finds its czxid.
func (b *Backend) look(ctx context.Context, node string) (position, error) {
	pos := position{node: node, parent: path.Dir(node)}
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
	st, err := call(ctx, func() (*zk.Stat, error) {
		exists, st, err := b.conn.Exists(pos.node)
		if err == nil && !exists {
			err = errors.New("queue node gone: the session expired")
		}
		return st, err
	})
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
	l, err := call(ctx, func() (listing, error) {
		c, st, err := b.conn.Children(pos.parent)
		return listing{c, st}, err
	})
	if err != nil {
		return err
	}
	pos.queue, pos.parentStat = sortQueue(l.children), l.stat
	pos.idx = slices.Index(pos.queue, path.Base(pos.node))
	if pos.idx < 0 {
		return errors.New("queue node gone: the session expired")
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
		if err := b.awaitHolder(ctx, pred); err != nil {
			return err
		}
		pos.idx = 0 // nothing was ahead of the holder, and nothing can queue ahead of us
		return nil
	}
	w, err := call(ctx, func() (watched, error) {
		exists, _, ch, err := b.conn.ExistsW(pred)
		return watched{exists: exists, ch: ch}, err
	})
	if err != nil {
		return err
	}
	ch := w.ch
	if w.exists {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-ch:
			if ev.Err != nil {
				return ev.Err
			}
		}
	}
	return b.list(ctx, pos)
}

// awaitHolder waits until the holder's node is gone. It times the holder's
// lease from each change of its node it sees; a lease that runs out without
// a renewal ends with the deletion of the node, by version, so that a
// renewal in between wins.
func (b *Backend) awaitHolder(ctx context.Context, holder string) error {
	for {
		w, err := call(ctx, func() (watched, error) {
			raw, st, ch, err := b.conn.GetW(holder)
			return watched{exists: err == nil, raw: raw, stat: st, ch: ch}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		st, ch := w.stat, w.ch
		v, err := decodeValue(holder, w.raw)
		if err != nil {
			return err
		}
		expire := time.NewTimer(v.ttl())
		select {
		case <-ctx.Done():
			expire.Stop()
			return ctx.Err()
		case ev := <-ch:
			expire.Stop()
			switch {
			case ev.Err != nil:
				return ev.Err
			case ev.Type == zk.EventNodeDeleted:
				return nil
			}
		case <-expire.C:
			err := b.deleteNode(ctx, holder, st.Version)
			if err == nil || errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			if !errors.Is(err, zk.ErrBadVersion) {
				return err
			}
		}
	}
}

// leave deletes a node that will not hold the lock before returning, with a
// context of its own since the caller's has often ended, and lets the
// janitor look at its parent. Failing that, the node goes with the session.
func (b *Backend) leave(node string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.deleteNode(ctx, node, -1); err == nil {
		b.janitor.mark(path.Dir(node))
	}
}

// granted records a hold and watches its node.
func (b *Backend) granted(token, node string, data []byte, pos position, sent time.Time) driver.Grant {
	h := newHold(token, node, data)
	g := driver.Grant{Fence: pos.fence, Lost: h.lost, Sent: sent}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		h.lose()
		return g
	}
	b.holds[token] = h
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		b.watchHold(h)
	}()
	return g
}

// deleteNode deletes a node at version (-1: any).
func (b *Backend) deleteNode(ctx context.Context, node string, version int32) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, b.conn.Delete(node, version) })
	return err
}

// ensure creates a persistent node if it is missing.
func (b *Backend) ensure(ctx context.Context, node string) error {
	_, err := call(ctx, func() (string, error) { return b.conn.Create(node, nil, zk.FlagPersistent, acl) })
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}
