package zklock

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// A read-write lock L lives under ROOT/rw.b64(L), a container no lock's or
// semaphore's parent can be. Its children form one queue by sequence, as in
// Curator's InterProcessReadWriteLock: a reader's ephemeral sequential node
// "lock-r-TOKEN-", a writer's "lock-w-TOKEN-", and a waiting writer's intent
// "lock-i-ID-". A reader holds if no writer's node or intent precedes its
// node; a writer holds if no reader's or writer's node precedes its own,
// whatever the intents. An attempt creates its node and deletes it again if
// it does not hold: a writer with an intent, in the same transaction,
// creates its intent or rewrites it (which renews it). The intent's place
// in the queue keeps out the readers that come after it, not the holders
// before it; the writer's later attempts queue behind it and ignore it, and
// the one that holds deletes it. An intent not rewritten for
// driver.WriteIntentTTL is deleted by the readers it keeps out, as a lease
// is (see expire).
//
// A downgrade (DowngradeRW) keeps the writer's node, and so its czxid (the
// fence), its place and its lease, and rewrites its value, by version,
// with Shared set. A node's name cannot change, and a new reader's node
// would queue behind every node created since, an intent or a writer's
// attempt among them: a writer's attempt queued between the old node and
// the new one would find neither ahead of it once the old one is gone, and
// hold beside the downgraded hold. So the queue's rules read the value of
// the one writer's node that can hold, the first, when no reader's node is
// ahead of it: a downgraded one holds as the writer it was granted as, a
// writer after it is refused by its kind, and a reader after it holds if
// no intent or other writer's node is ahead, as beside a reader. Readers
// that came after a waiting writer's intent stay out; those that came
// before it come in. Renewals write the node at the version they know, so
// that none undoes a downgrade (renewIn). Clients of earlier releases take
// the node for a writer's: their readers wait for it to end, which is safe.

var (
	_ driver.RWLocks      = (*Backend)(nil)
	_ driver.RWDowngrader = (*Backend)(nil)
)

// Node kinds, after nodePrefix.
const (
	readKind   = "r-"
	writeKind  = "w-"
	intentKind = "i-"
)

// rwPath returns the node under which name's queue lives.
func (b *Backend) rwPath(name string) string {
	return b.root + "/rw." + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// kindOf returns the kind of a queue node's name.
func kindOf(name string) string {
	return name[len(nodePrefix) : len(nodePrefix)+len(readKind)]
}

// blocks reports whether a node of kind ahead of an attempt in mode
// refuses it.
func blocks(kind string, mode driver.Mode) bool {
	if mode == driver.Shared {
		return kind == writeKind || kind == intentKind
	}
	return kind == readKind || kind == writeKind
}

// AcquireRW makes one attempt to take req.Key in mode (see the layout
// above). A node alone in the queue holds at once, in one request, as a
// lock's; otherwise the attempt lists the queue and times the leases of the
// nodes that refuse it (see expire). The fence is the node's czxid.
func (b *Backend) AcquireRW(ctx context.Context, req driver.AcquireRequest, mode driver.Mode) (driver.Grant, error) {
	if mode != driver.Shared && mode != driver.Exclusive {
		return driver.Grant{}, fmt.Errorf("%w: mode %d", driver.ErrInvalidOption, mode)
	}
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Grant{}, driver.Wrap("zklock", err)
	}
	defer stop()
	g, err := b.acquireRW(ctx, req, mode, req.Intent)
	if err != nil {
		return driver.Grant{}, driver.Wrap("zklock", err)
	}
	return g, nil
}

func (b *Backend) acquireRW(ctx context.Context, req driver.AcquireRequest, mode driver.Mode, intent string) (driver.Grant, error) {
	st, err := b.state()
	if err != nil {
		return driver.Grant{}, err
	}
	kind := writeKind
	if mode == driver.Shared {
		kind, intent = readKind, ""
	}
	rp := b.rwPath(req.Key)
	data := encodeValue(req.Token, req.TTL, req.Meta)
	sent := time.Now()
	pos, err := b.createIn(ctx, rp, nodeName(kind+req.Token), data)
	if err != nil {
		return driver.Grant{}, err
	}
	free, refusers := pos.first(), 0
	if !free {
		free, refusers, err = b.rwFree(ctx, st, &pos, mode)
	}
	if err == nil && free {
		g, err := b.granted(req, pos.node, data, pos, sent, false)
		if err != nil {
			b.leave(pos.node)
			return driver.Grant{}, err
		}
		if in := findToken(pos.queue, intentKind+intent); intent != "" && in != "" {
			// Failing, the intent keeps readers out until it expires.
			_ = b.deleteNode(ctx, rp+"/"+in, -1)
		}
		return g, nil
	}
	if err == nil && intent != "" {
		if err = b.recordIntent(ctx, &pos, intent); err == nil {
			return driver.Grant{}, fmt.Errorf("%w: %d holds or writers ahead", driver.ErrNotAcquired, refusers)
		}
	}
	b.leave(pos.node)
	if err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{}, fmt.Errorf("%w: %d holds or writers ahead", driver.ErrNotAcquired, refusers)
}

// createIn creates a queue node under parent, creating the parent (as a
// container) and the root when they are missing.
func (b *Backend) createIn(ctx context.Context, parent, name string, data []byte) (position, error) {
	for range 3 {
		pos, err := b.createNode(ctx, parent, name, data)
		if !errors.Is(err, zk.ErrNoNode) {
			return pos, err
		}
		if err := b.createParent(ctx, parent); err != nil {
			return position{}, err
		}
	}
	return position{}, fmt.Errorf("parent %s keeps being deleted", parent)
}

// rwFree lists pos's queue and reports whether nothing ahead of its node
// refuses mode once the leases and intents that ran out are ended, and how
// many nodes refused it. A downgraded writer's node, read by expire, lets
// a reader in.
func (b *Backend) rwFree(ctx context.Context, st *syncState, pos *position, mode driver.Mode) (bool, int, error) {
	if err := b.list(ctx, pos); err != nil {
		return false, 0, err
	}
	st.keep(pos.parent, pos.queue)
	var refusers []string
	for _, c := range pos.queue[:pos.idx] {
		if blocks(kindOf(c), mode) {
			refusers = append(refusers, c)
		}
	}
	if len(refusers) == 0 {
		return true, 0, nil
	}
	var lets func(value) bool
	if mode == driver.Shared {
		lets = func(v value) bool { return v.Shared }
	}
	gone, err := b.expire(ctx, st, pos.parent, refusers, lets)
	return err == nil && gone == len(refusers), len(refusers) - gone, err
}

// recordIntent replaces the refused writer's node by its intent, in one
// transaction: it rewrites the intent's node if the queue has it, which
// renews it in place, else creates it at the tail.
func (b *Backend) recordIntent(ctx context.Context, pos *position, intent string) error {
	data := encodeValue(intent, driver.WriteIntentTTL, driver.Meta{})
	multi := func(op any) error {
		_, err := call(ctx, b, func() (struct{}, error) {
			_, err := b.conn.Multi(&zk.DeleteRequest{Path: pos.node, Version: -1}, op)
			return struct{}{}, err
		}, nil)
		return err
	}
	if in := findToken(pos.queue, intentKind+intent); in != "" {
		err := multi(&zk.SetDataRequest{Path: pos.parent + "/" + in, Data: data, Version: -1})
		if !errors.Is(err, zk.ErrNoNode) {
			return err
		}
	}
	return multi(&zk.CreateRequest{Path: pos.parent + "/" + nodeName(intentKind+intent), Data: data, Acl: acl, Flags: zk.FlagEphemeralSequential})
}

// RenewRW rewrites token's node (see Renew).
func (b *Backend) RenewRW(ctx context.Context, name, token string, ttl time.Duration) error {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Wrap("zklock", err)
	}
	defer stop()
	if err := b.renewIn(ctx, b.rwPath(name), token, ttl, readKind+token, writeKind+token); err != nil {
		return driver.Wrap("zklock", err)
	}
	return nil
}

// ReleaseRW deletes token's node, which wakes the waiters' watches; the
// parent goes shortly after its queue is empty.
func (b *Backend) ReleaseRW(ctx context.Context, name, token string) error {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Wrap("zklock", err)
	}
	defer stop()
	if err := b.releaseIn(ctx, b.rwPath(name), token, true, readKind+token, writeKind+token); err != nil {
		return driver.Wrap("zklock", err)
	}
	return nil
}

// WithdrawIntent deletes the intent's node, if any.
func (b *Backend) WithdrawIntent(ctx context.Context, name, intent string) error {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Wrap("zklock", err)
	}
	defer stop()
	rp := b.rwPath(name)
	node, _, err := b.heldNode(ctx, rp, "", intentKind+intent)
	if err == nil {
		err = b.deleteNode(ctx, node, -1)
		if err == nil {
			b.janitor.mark(rp)
		}
	}
	if err != nil && !errors.Is(err, driver.ErrNotHeld) && !errors.Is(err, zk.ErrNoNode) {
		return driver.Wrap("zklock", err)
	}
	return nil
}

// InspectRW returns the nodes of name's queue that hold by the queue's
// rules (an attempt about to be granted may show a moment early, a holder
// whose lease ran out until someone refused by it deletes it), and the
// number of intents in the queue. A downgraded writer's hold is a reader's.
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.Mode, []driver.Info, int, error) {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return 0, nil, 0, driver.Wrap("zklock", err)
	}
	defer stop()
	rp := b.rwPath(name)
	mode, intents := driver.Shared, 0
	held, err := b.nodesInfo(ctx, name, rp, func(ctx context.Context, queue []string) ([]string, error) {
		down, err := b.downgradedIn(ctx, rp, queue)
		if err != nil {
			return nil, err
		}
		holders, in := rwHolders(queue, down)
		intents = len(in)
		if len(holders) > 0 && kindOf(holders[0]) == writeKind && holders[0] != down {
			mode = driver.Exclusive
		}
		return holders, nil
	})
	if err != nil {
		return 0, nil, 0, driver.Wrap("zklock", err)
	}
	if len(held) == 0 {
		mode = driver.Shared
	}
	return mode, held, intents, nil
}

// rwHolders returns the nodes of a queue (by sequence) that hold by its
// rules, and its intents. downgraded, if not "", is the writer's node whose
// hold was downgraded: it holds as a writer does, and lets in the readers
// after it as a reader does.
func rwHolders(queue []string, downgraded string) (holders, intents []string) {
	var ahead []string // the kinds ahead
	for _, c := range queue {
		k := kindOf(c)
		mode := driver.Exclusive
		if k == readKind {
			mode = driver.Shared
		}
		switch {
		case k == intentKind:
			intents = append(intents, c)
		case !slices.ContainsFunc(ahead, func(a string) bool { return blocks(a, mode) }):
			holders = append(holders, c)
		}
		if c == downgraded {
			k = readKind
		}
		if !slices.Contains(ahead, k) {
			ahead = append(ahead, k)
		}
	}
	return holders, intents
}

// writerHold returns the node of queue (by sequence) that may be a
// writer's hold: the first writer's node, if no reader's is ahead of it. A
// writer holds only with no reader's or writer's node ahead, so no other
// writer's node can, and only a hold is downgraded.
func writerHold(queue []string) string {
	for _, c := range queue {
		switch kindOf(c) {
		case readKind:
			return ""
		case writeKind:
			return c
		}
	}
	return ""
}

// downgradedIn returns the writer's hold of parent's queue if its value
// says it was downgraded, and "" otherwise.
func (b *Backend) downgradedIn(ctx context.Context, parent string, queue []string) (string, error) {
	node := writerHold(queue)
	if node == "" {
		return "", nil
	}
	v, _, err := b.readValue(ctx, parent+"/"+node)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return "", nil
	case err != nil:
		return "", err
	case v.Shared:
		return node, nil
	}
	return "", nil
}

// WatchRW fires wake when name's queue changes: a hold released or
// expired, an intent withdrawn, a writer's hold downgraded. For the last
// it watches the value of the node that may be a writer's hold while it
// is not downgraded; its renewals fire that watch too, and cost each
// watcher a look at the queue, but wake nobody.
func (b *Backend) WatchRW(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	rp := b.rwPath(name)
	// The writer's hold as of the last look, and the watch on its value
	// while it is pending; looks are one at a time.
	var last struct {
		node   string
		shared bool
		ch     <-chan zk.Event
	}
	wake, stop, err := b.watchQueue(ctx, func(ctx context.Context) (*queueWatch, error) {
		w, err := b.armWatches(ctx, rp, "")
		if err != nil {
			return nil, err
		}
		node := writerHold(w.queue)
		if node != last.node || !last.shared && watchFired(last.ch) {
			last.node, last.shared, last.ch = node, false, nil
			if node != "" {
				got, err := call(ctx, b, func() (watched, error) {
					raw, _, ch, err := b.conn.GetW(rp + "/" + node)
					return watched{raw: raw, ch: ch}, err
				}, nil)
				switch {
				case errors.Is(err, zk.ErrNoNode): // gone since the listing: the queue's watch fires
				case err != nil:
					last.node = ""
					return nil, err
				default:
					v, err := decodeValue(rp+"/"+node, got.raw)
					last.shared = err == nil && v.Shared
					if !last.shared {
						last.ch = got.ch // a downgraded node stays so: no need to watch it
					}
				}
			}
		}
		w.chs[1] = last.ch
		if last.shared {
			w.downgraded = node
		}
		holders, intents := rwHolders(w.queue, w.downgraded)
		w.counted = append(holders, intents...)
		return w, nil
	})
	if err != nil {
		return nil, nil, driver.Wrap("zklock", err)
	}
	return wake, stop, nil
}

// watchFired reports whether a one-time watch has fired; a nil one has not.
func watchFired(ch <-chan zk.Event) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// DowngradeRW rewrites the value of token's writer's node of name with
// Shared set, by the version it read, which keeps the node's czxid (the
// fence), its place in the queue and its lease; a write in between (a
// renewal) fails it, and it reads the node again. The write fires the
// watch WatchRW keeps on the node's value, which wakes the readers waiting
// on it. A writer's node this backend did not grant is downgraded only if
// it holds: no reader's or writer's node is ahead of it. A token's
// reader's node is confirmed to exist, by a check the leader answers, and
// left as it is; a token with neither gets driver.ErrNotHeld.
func (b *Backend) DowngradeRW(ctx context.Context, name, token string) error {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Wrap("zklock", err)
	}
	defer stop()
	if err := b.downgrade(ctx, b.rwPath(name), token); err != nil {
		return driver.Wrap("zklock", err)
	}
	return nil
}

func (b *Backend) downgrade(ctx context.Context, parent, token string) error {
	node, h, err := b.heldNode(ctx, parent, token, writeKind+token, readKind+token)
	switch {
	case err != nil:
		return err
	case kindOf(path.Base(node)) == readKind:
		return b.present(ctx, node)
	case h == nil:
		if err := b.writerHolds(ctx, node); err != nil {
			return err
		}
	}
	for range 3 {
		v, st, err := b.readValue(ctx, node)
		if err != nil {
			return notHeld(err)
		}
		if !v.Shared {
			v.Shared = true
			data := v.encode()
			st, err = call(ctx, b, func() (*zk.Stat, error) { return b.conn.Set(node, data, st.Version) }, nil)
			if errors.Is(err, zk.ErrBadVersion) {
				continue // renewed meanwhile
			}
			if err != nil {
				if h != nil {
					b.wrote(h, nil, err) // may have been written
				}
				return notHeld(err)
			}
		}
		if h != nil {
			// After an earlier downgrade, st is the read's: should another
			// write have come since, the next renewal reads the node again.
			b.mu.Lock()
			h.setLocked(h.ttl, true)
			h.version = st.Version
			b.mu.Unlock()
		}
		return nil
	}
	return fmt.Errorf("%s kept changing", node)
}

// writerHolds returns nil if the writer's node, granted by another
// backend, holds: no reader's or writer's node is ahead of it in a listing
// made after a sync with the leader. Otherwise it is an attempt, not a
// hold, and the error matches driver.ErrNotHeld.
func (b *Backend) writerHolds(ctx context.Context, node string) error {
	pos := position{node: node, parent: path.Dir(node)}
	_, err := call(ctx, b, func() (string, error) { return b.conn.Sync(pos.parent) }, nil)
	if err == nil {
		err = b.list(ctx, &pos)
	}
	switch {
	case errors.Is(err, errNodeGone):
		return errors.Join(driver.ErrNotHeld, err)
	case err != nil:
		return err
	case slices.ContainsFunc(pos.queue[:pos.idx], func(c string) bool { return blocks(kindOf(c), driver.Exclusive) }):
		return fmt.Errorf("%w: a writer's attempt, with a hold ahead of it", driver.ErrNotHeld)
	}
	return nil
}

// present returns nil if node exists, by a check the leader answers, and
// otherwise an error matching driver.ErrNotHeld.
func (b *Backend) present(ctx context.Context, node string) error {
	_, err := call(ctx, b, func() (struct{}, error) {
		rs, err := b.conn.Multi(&zk.CheckVersionRequest{Path: node, Version: -1})
		for _, r := range rs {
			err = cmp.Or(err, r.Error)
		}
		return struct{}{}, err
	}, nil)
	return notHeld(err)
}
