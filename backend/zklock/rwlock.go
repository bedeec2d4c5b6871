package zklock

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

var _ driver.RWLocks = (*Backend)(nil)

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
// many nodes refused it.
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
	gone, err := b.expire(ctx, st, pos.parent, refusers)
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
// number of intents in the queue.
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.Mode, []driver.Info, int, error) {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return 0, nil, 0, driver.Wrap("zklock", err)
	}
	defer stop()
	mode, intents := driver.Shared, 0
	held, err := b.nodesInfo(ctx, name, b.rwPath(name), func(queue []string) []string {
		holders, in := rwHolders(queue)
		intents = len(in)
		if len(holders) > 0 && kindOf(holders[0]) == writeKind {
			mode = driver.Exclusive
		}
		return holders
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
// rules, and its intents.
func rwHolders(queue []string) (holders, intents []string) {
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
		if !slices.Contains(ahead, k) {
			ahead = append(ahead, k)
		}
	}
	return holders, intents
}

// WatchRW fires wake when name's queue changes: a hold released or
// expired, an intent withdrawn.
func (b *Backend) WatchRW(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	wake, stop, err := b.watchQueue(ctx, b.rwPath(name), "", func(queue []string, _ int) []string {
		holders, intents := rwHolders(queue)
		return append(holders, intents...)
	})
	if err != nil {
		return nil, nil, driver.Wrap("zklock", err)
	}
	return wake, stop, nil
}
