package distlock

import (
	"context"
	"errors"
	"time"

	"github.com/distlock/distlock/driver"
)

// tryAtOnce is tryAll in one request, on a backend that takes a set of
// keys at once (driver.MultiAcquirer): every key of sorted not in held,
// all or none. It returns as tryAll does, and tried false, having done
// nothing, where only the one-by-one form applies: fewer than two keys to
// take, keys the store cannot take together, or a reentrant request
// (which may join a hold of its owner's instead of taking the key).
func (c *Client) tryAtOnce(ctx context.Context, m driver.MultiAcquirer, sorted []string, held map[string]*Lock, opts []Option) (busy string, tried bool, err error) {
	keys := make([]string, 0, len(sorted))
	for _, k := range sorted {
		if held[k] == nil {
			keys = append(keys, k)
		}
	}
	var asked Request
	for _, o := range opts {
		o(&asked)
	}
	if len(keys) < 2 || asked.Reentrant || !m.AcquiresTogether(keys) {
		return "", false, nil
	}
	rs := make([]Request, len(keys))
	reqs := make([]driver.AcquireRequest, len(keys))
	for i, k := range keys {
		r, err := c.prepare(ctx, k, true, opts)
		if err != nil {
			return k, true, err
		}
		rs[i] = r
		reqs[i] = driver.AcquireRequest{Key: k, Token: newToken(), TTL: r.Lease + r.LockDelay, Meta: r.Meta}
	}
	if !c.enterAcquire() {
		return keys[0], true, keyErr(c.acquireOp, keys[0], ErrClosed)
	}
	defer c.inflight.Done()

	obsCtxs := make([]context.Context, len(rs))
	var start time.Time
	for i := range rs {
		obsCtxs[i], start = c.acquireStarted(ctx, &rs[i])
	}
	grants, err := m.AcquireAll(ctx, reqs)
	c.observeCall(ctx, nil, "acquire_all", start, err)
	if err == nil && len(grants) != len(reqs) {
		err = driver.Wrap(c.backendName, errors.New("acquire all: the store answered for another number of keys"))
	}
	var heldErr *driver.HeldError
	switch {
	case errors.As(err, &heldErr):
		for i := range rs {
			_ = c.acquireEnded(obsCtxs[i], &rs[i], start, 0, "", err)
		}
		return heldErr.Key, true, nil
	case err != nil:
		// The store may have taken the keys and lost only its answer.
		for i := range rs {
			c.releaseAbandoned(&rs[i], reqs[i].Token)
			err = c.acquireEnded(obsCtxs[i], &rs[i], start, 0, "", err)
		}
		return keys[0], true, err
	}
	var failed error
	for i, g := range grants {
		sent := start
		if !g.Sent.IsZero() {
			sent = g.Sent
		}
		h, err := c.newHold(obsCtxs[i], rs[i], reqs[i].Token, g, sent)
		if err != nil { // too late, or Close came: newHold released the key
			err = c.acquireEnded(obsCtxs[i], &rs[i], start, 0, "", err)
			if busy == "" {
				busy = keys[i]
				if !errors.Is(err, ErrNotAcquired) {
					failed = err
				}
			}
			continue
		}
		h.arm(g)
		held[keys[i]] = &Lock{h: h}
		_ = c.acquireEnded(obsCtxs[i], &rs[i], start, g.Fence, h.tokenID, nil)
	}
	return busy, true, failed
}
