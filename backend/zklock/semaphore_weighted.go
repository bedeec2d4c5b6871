package zklock

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// Holds of several permits (driver.WeightedPermits). A node's name tells
// what it counts, so that one listing decides an attempt; tokens have no
// '.', so the forms cannot be taken for one another:
//
//	lock-TOKEN-SEQ             a hold of one permit, or an attempt at one
//	lock-TOKEN-.N-SEQ          a hold of N permits, or an attempt at them
//	lock-.b64(INTENT)-SEQ      a waiting request's intent, which counts none
//
// and the node's value says the count too (value.Permits), for Inspect.
// The rule is Curator's with counts: an attempt's node holds if no intent
// is ahead of it and it and the holds and attempts ahead of it count at
// most the limit.
//
// A request that waits (one with an intent) decides on a listing before
// it creates anything. It may take its permits if no intent ahead of its
// own is left, or none at all if it has none yet, once those that were not
// rewritten for driver.WriteIntentTTL are deleted (see expire), and if the
// nodes of the queue that may hold and its own count at most the limit:
// every node but an intent, and but a single attempt behind its intent,
// which its intent refuses. It then creates its hold at the tail, named
// with its count, and deletes its intent, in one transaction that also
// writes the parent at the version the listing saw: every attempt's create
// writes the parent (createPermit), so none came in between, and the new
// node's fence, its czxid, is above every earlier grant's. Refused, it
// creates its intent at the tail, or rewrites it in place, which renews
// it; so a request that waits creates and deletes no node of its own, and
// wakes nobody, until it is granted.
//
// A single attempt created before such a hold, behind the intent, and
// listed after the transaction finds no intent ahead; it is refused if a
// node named with its count is behind it, since that hold did not count
// it. One listed before the transaction has the intent ahead of it, and
// finds it gone when it reads it to time it: it lists again, and finds
// the hold behind it (fitListed). Never more than the limit is held: take
// the live hold with the highest sequence. Made by an attempt without an
// intent, its listing had every other live hold ahead of it, counted.
// Made by a waiting request, its listing had every other too, and counted
// all but single attempts behind its intent, none of which holds: one
// whose intents ahead were all still there when read is refused by them,
// and one that lists after the transaction has this hold, still live,
// behind it.
//
// Attempts without an intent skip the listing while few enough nodes
// exist: a semaphore that never took a weighted hold has neither counts
// nor intents. The first attempt that takes one marks the semaphore, in
// one transaction, with a child of its limit node and a rewrite of the
// limit node, whose version every attempt checks: an attempt that began
// before the mark fails its check and reads the limit again, and finds the
// mark. Clients of earlier releases count a hold of several permits as one
// permit and an intent as one: do not take weighted holds on a semaphore
// they use.

// weightedNode is the child of a semaphore's limit node that marks it as
// taking weighted holds. It stays with the limit node.
const weightedNode = "weighted"

// weightedName is the name, before its sequence, of token's hold of n
// permits, or of an attempt at them.
func weightedName(token string, n int) string { return nodeName(token) + "." + strconv.Itoa(n) + "-" }

// intentName is the name, before its sequence, of a waiting request's
// intent.
func intentName(intent string) string {
	return nodePrefix + "." + base64.RawURLEncoding.EncodeToString([]byte(intent)) + "-"
}

// semNode is what a semaphore queue node's name tells of it.
type semNode struct {
	intent   bool // a waiting request's intent, which counts no permit
	weighted bool // named with its count, as every hold of a request with an intent is
	permits  int
}

// parseSemNode reads a semaphore queue node's name (see sortQueue).
func parseSemNode(name string) semNode {
	body := name[len(nodePrefix) : len(name)-seqLen]
	if strings.HasPrefix(body, ".") {
		return semNode{intent: true}
	}
	if i := strings.LastIndexByte(body, '.'); i >= 0 {
		if n, err := strconv.Atoi(strings.TrimSuffix(body[i+1:], "-")); err == nil && n >= 1 {
			return semNode{weighted: true, permits: n}
		}
	}
	return semNode{permits: 1}
}

// splitQueue splits queue nodes into intents and holds (or attempts).
func splitQueue(queue []string) (intents, holds []string) {
	for _, c := range queue {
		if parseSemNode(c).intent {
			intents = append(intents, c)
		} else {
			holds = append(holds, c)
		}
	}
	return intents, holds
}

// semCounted returns the nodes of a semaphore's queue (by sequence) whose
// going may let a request in: the intents, and the nodes that may hold,
// those within the limit by the counts up to them of the nodes that are
// not behind an intent or are named with their count (a waiting request's
// hold, made behind the later intents). A single attempt's node behind an
// intent, always refused, thus comes and goes without waking anyone.
func semCounted(queue []string, limit int) []string {
	var out []string
	held, behind := 0, false
	for _, c := range queue {
		switch k := parseSemNode(c); {
		case k.intent:
			out, behind = append(out, c), true
		case !behind || k.weighted:
			if held += k.permits; held <= max(limit, 1) {
				out = append(out, c)
			}
		}
	}
	return out
}

// fit is an attempt's decision: whether it holds, and what refused it.
type fit struct {
	ok      bool
	held    int  // the permits counted before it
	waiting int  // the intents ahead of it
	later   bool // a node named with its count is behind it
}

func (f fit) refused(limit, n int) error {
	switch {
	case f.waiting > 0:
		return fmt.Errorf("%w: %d requests wait", driver.ErrNotAcquired, f.waiting)
	case f.later:
		return fmt.Errorf("%w: a waiting request came in meanwhile", driver.ErrNotAcquired)
	}
	return fmt.Errorf("%w: %d of %d permits held, %d wanted", driver.ErrNotAcquired, f.held, limit, n)
}

// fits decides an attempt at n permits under parent: it holds if none of
// intents is left and holds count at most limit-n permits, once those of
// them not renewed for their TTL are deleted (see expire).
func (b *Backend) fits(ctx context.Context, st *syncState, parent string, intents, holds []string, limit, n int) (fit, error) {
	if len(intents) > 0 {
		gone, err := b.expire(ctx, st, parent, intents, nil)
		if err != nil || gone < len(intents) {
			return fit{waiting: len(intents) - gone}, err
		}
	}
	f := fit{}
	for _, c := range holds {
		f.held += parseSemNode(c).permits
	}
	if f.held+n <= limit {
		return fit{ok: true}, nil
	}
	for _, c := range holds {
		gone, err := b.expire(ctx, st, parent, []string{c}, nil)
		if err != nil {
			return f, err
		}
		f.held -= gone * parseSemNode(c).permits
	}
	f.ok = f.held+n <= limit
	return f, nil
}

// markWeighted marks sp as taking weighted holds: it creates the limit
// node's child and rewrites the limit node at lim's version, in one
// transaction, and returns the limit as it left it.
func (b *Backend) markWeighted(ctx context.Context, sp string, lim storedLimit) (storedLimit, error) {
	node := sp + "/" + limitNode
	st, err := call(ctx, b, func() (*zk.Stat, error) {
		rs, err := b.conn.Multi(
			&zk.CreateRequest{Path: node + "/" + weightedNode, Acl: acl, Flags: zk.FlagPersistent},
			&zk.SetDataRequest{Path: node, Data: []byte(strconv.Itoa(lim.n)), Version: lim.version},
		)
		if err == nil && (len(rs) != 2 || rs[1].Stat == nil) {
			err = fmt.Errorf("mark weighted: %d results for 2 operations", len(rs))
		}
		if err != nil {
			return nil, err
		}
		return rs[1].Stat, nil
	}, nil)
	if err != nil {
		return storedLimit{}, err
	}
	return storedLimit{n: lim.n, version: st.Version, weighted: true}, nil
}

// claimAttempts bounds the listings of one attempt with an intent whose
// transaction finds the queue changed since.
const claimAttempts = 4

// claimPermits makes the attempt of a request with an intent (see the
// layout above): it lists the queue and, if its intent is first and the
// permits fit, creates its hold at the tail and deletes its intent in one
// transaction conditioned on the parent's version; refused, it records
// its intent.
func (b *Backend) claimPermits(ctx context.Context, st *syncState, sp string, lim storedLimit, req driver.AcquireRequest, n int, data []byte, sent time.Time) (driver.Grant, error) {
	in := intentName(req.Intent)
	var (
		f    fit
		mine string
	)
	for range claimAttempts {
		l, err := call(ctx, b, func() (listing, error) {
			c, st, err := b.conn.Children(sp)
			return listing{sortQueue(c), st}, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			return driver.Grant{}, errLimitChanged // and the semaphore's node with it
		}
		if err != nil {
			return driver.Grant{}, err
		}
		st.keep(sp, l.queue)
		mine = ""
		at := slices.IndexFunc(l.queue, func(c string) bool { return len(c) == len(in)+seqLen && strings.HasPrefix(c, in) })
		ahead := l.queue
		if at >= 0 {
			ahead, mine = l.queue[:at], l.queue[at]
		}
		intents, _ := splitQueue(ahead)
		var holds []string // all but the single attempts behind the intent, which are refused
		for i, c := range l.queue {
			if k := parseSemNode(c); !k.intent && (k.weighted || at < 0 || i < at) {
				holds = append(holds, c)
			}
		}
		if f, err = b.fits(ctx, st, sp, intents, holds, lim.n, n); err != nil {
			return driver.Grant{}, err
		}
		if !f.ok {
			break
		}
		g, err := b.claim(ctx, sp, lim, req, mine, n, data, l.stat.Version, sent)
		if !errors.Is(err, errQueueChanged) {
			return g, err
		}
	}
	if err := b.keepPermitIntent(ctx, sp, in, mine, req.Intent); err != nil {
		return driver.Grant{}, err
	}
	if f.ok {
		return driver.Grant{}, fmt.Errorf("%w: the queue kept changing", driver.ErrNotAcquired)
	}
	return driver.Grant{}, f.refused(lim.n, n)
}

// listing is a parent's queue (by sequence) and its stat.
type listing struct {
	queue []string
	stat  *zk.Stat
}

// errQueueChanged: a node was created under the parent, or the intent
// deleted, since the listing a claim was decided on.
var errQueueChanged = errors.New("queue changed")

// claim creates req's hold of n permits at the tail of sp's queue and
// deletes its intent node mine (if not ""), in one transaction that checks
// the limit node's version and writes the parent at version, and records
// the grant. The parent's stat comes back with the answer: its mzxid is
// the transaction's zxid, the hold's czxid, the fence.
func (b *Backend) claim(ctx context.Context, sp string, lim storedLimit, req driver.AcquireRequest, mine string, n int, data []byte, version int32, sent time.Time) (driver.Grant, error) {
	ops := []any{
		&zk.CheckVersionRequest{Path: sp + "/" + limitNode, Version: lim.version},
		&zk.SetDataRequest{Path: sp, Version: version},
		&zk.CreateRequest{Path: sp + "/" + weightedName(req.Token, n), Data: data, Acl: acl, Flags: zk.FlagEphemeralSequential},
	}
	if mine != "" {
		ops = append(ops, &zk.DeleteRequest{Path: sp + "/" + mine, Version: -1})
	}
	pos, err := call(ctx, b, func() (position, error) {
		rs, err := b.conn.Multi(ops...)
		if len(rs) == len(ops) {
			switch {
			case errors.Is(rs[0].Error, zk.ErrBadVersion), errors.Is(rs[0].Error, zk.ErrNoNode):
				return position{}, errLimitChanged
			case errors.Is(rs[1].Error, zk.ErrBadVersion), mine != "" && errors.Is(rs[3].Error, zk.ErrNoNode):
				return position{}, errQueueChanged
			}
		}
		if err == nil && (len(rs) != len(ops) || rs[1].Stat == nil) {
			err = fmt.Errorf("claim permits: %d results for %d operations", len(rs), len(ops))
		}
		if err != nil {
			return position{}, err
		}
		return position{node: rs[2].String, parent: sp, idx: -1, fence: uint64(rs[1].Stat.Mzxid)}, nil
	}, func(ctx context.Context, pos position) { _ = b.deleteNode(ctx, pos.node, -1) })
	if err != nil {
		return driver.Grant{}, err
	}
	g, err := b.granted(req, pos.node, data, pos, sent, false)
	if err != nil {
		b.leave(pos.node)
		return driver.Grant{}, err
	}
	return g, nil
}

// keepPermitIntent records intent, whose node's name begins with in, in
// sp's queue: it rewrites mine, the intent's node if the queue had it,
// which renews it in place, and else creates the node at the tail.
func (b *Backend) keepPermitIntent(ctx context.Context, sp, in, mine, intent string) error {
	data := encodeValue(intent, driver.WriteIntentTTL, driver.Meta{})
	if mine != "" {
		_, err := call(ctx, b, func() (*zk.Stat, error) { return b.conn.Set(sp+"/"+mine, data, -1) }, nil)
		if !errors.Is(err, zk.ErrNoNode) {
			return err
		}
	}
	_, err := call(ctx, b, func() (string, error) {
		return b.conn.Create(sp+"/"+in, data, zk.FlagEphemeralSequential, acl)
	}, func(ctx context.Context, node string) { _ = b.deleteNode(ctx, node, -1) })
	return err
}

// permitAgain returns, with again set, the outcome of an attempt by a
// token whose hold of the semaphore under sp this backend granted: the
// hold renewed for req.TTL and its grant, or the renewal's failure. A hold
// the store no longer keeps is no outcome: the attempt goes on as a new
// one.
func (b *Backend) permitAgain(ctx context.Context, sp string, req driver.AcquireRequest) (g driver.Grant, again bool, err error) {
	b.mu.Lock()
	h := b.holds[req.Token]
	b.mu.Unlock()
	if h == nil || path.Dir(h.path) != sp {
		return driver.Grant{}, false, nil
	}
	switch err := b.renewIn(ctx, sp, req.Token, req.TTL, req.Token); {
	case errors.Is(err, driver.ErrNotHeld):
		return driver.Grant{}, false, nil
	case err != nil:
		return driver.Grant{}, true, err
	}
	return driver.Grant{Fence: h.fence, Lost: h.lost}, true, nil
}

// WithdrawPermitIntent deletes the intent's node, if any, which wakes the
// name's watchers.
func (b *Backend) WithdrawPermitIntent(ctx context.Context, name, intent string) error {
	ctx, stop, err := b.op(ctx)
	if err != nil {
		return driver.Wrap("zklock", err)
	}
	defer stop()
	sp, in := b.semPath(name), intentName(intent)
	children, err := call(ctx, b, func() ([]string, error) {
		c, _, err := b.conn.Children(sp)
		return c, err
	}, nil)
	for _, c := range children {
		if len(c) == len(in)+seqLen && strings.HasPrefix(c, in) {
			err = b.deleteNode(ctx, sp+"/"+c, -1)
		}
	}
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return driver.Wrap("zklock", err)
	}
	return nil
}
