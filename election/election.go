// Package election elects one leader among the replicas of a service, over
// any distlock backend, with the promises of a distlock lock: the leader's
// term is a lock with a lease the watchdog renews, its loss is told through
// Done, Err and Context, and each term has a fence that is higher than every
// earlier term's.
//
//	e, err := election.New(client, "billing-worker")
//	term, err := e.Campaign(ctx, "10.0.0.7:8080") // blocks until leader
//	defer term.Resign(context.WithoutCancel(ctx))
//	runWorker(term.Context(), term.Fence())        // stops when the term ends
//
// Candidates that are not leader wait in Campaign as waiters of the lock do:
// woken by the store's release notices where the backend has them, so a
// Resign hands over at once, and after the lease where a leader vanished.
// Leader tells anyone the current leader's value and fence; Observe follows
// the changes.
//
// The hard truth is the lock's: a leader paused past its lease (a long GC,
// a frozen VM) is told of its loss only when it runs again, by which time
// another may lead. Pass the term's fence to whatever the leader writes, so
// that the resource can refuse a former leader (package fence).
package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// KeyPrefix is prefixed to an election's name to make its lock's key.
const KeyPrefix = "election/"

// ValueLabel is the label of the election's lock that holds the leader's
// value.
const ValueLabel = "election.value"

// ErrNoLeader is returned by Leader when nobody leads.
var ErrNoLeader = errors.New("election: no leader")

// DefaultPollInterval is how often Observe asks the store for the leader
// unless WithPollInterval says otherwise.
const DefaultPollInterval = 250 * time.Millisecond

// Election is one named election over a client's store. It is safe for
// concurrent use; candidates in several processes use elections of the same
// name over the same store.
type Election struct {
	c    *distlock.Client
	name string
	key  string
	poll time.Duration
}

// Option configures an Election.
type Option func(*Election)

// WithPollInterval sets how often Observe asks the store for the leader
// while no release notice arrives. The default is DefaultPollInterval; it
// must be at least a millisecond.
func WithPollInterval(d time.Duration) Option { return func(e *Election) { e.poll = d } }

// New returns the election name over c. The name must not be empty, and
// becomes the key KeyPrefix+name, which must be a valid key
// (distlock.ErrInvalidKey otherwise).
func New(c *distlock.Client, name string, opts ...Option) (*Election, error) {
	if c == nil {
		return nil, fmt.Errorf("election: New: %w: client is nil", distlock.ErrInvalidOption)
	}
	e := &Election{c: c, name: name, key: KeyPrefix + name, poll: DefaultPollInterval}
	if name == "" {
		return nil, fmt.Errorf("election: New: %w: the name is empty", distlock.ErrInvalidKey)
	}
	if err := driver.ValidateKey(e.key); err != nil {
		return nil, fmt.Errorf("election %q: %w", name, err)
	}
	for _, o := range opts {
		o(e)
	}
	if e.poll < time.Millisecond {
		return nil, fmt.Errorf("election %q: %w: poll interval %v is under 1ms", name, distlock.ErrInvalidOption, e.poll)
	}
	return e, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Key returns the key of the election's lock.
func (e *Election) Key() string { return e.key }

// Campaign blocks until this candidate leads, or ctx ends (its error then
// matches ctx's), and returns its term. value tells others who leads (an
// address, a pod name); it is stored with the lock. opts are the lock's
// (WithLease, WithOwner, ...); without WithWait the campaign lasts until
// ctx ends.
func (e *Election) Campaign(ctx context.Context, value string, opts ...distlock.Option) (*Term, error) {
	all := append([]distlock.Option{distlock.WithMetadata(map[string]string{ValueLabel: value})}, opts...)
	l, err := e.c.Lock(ctx, e.key, all...)
	if err != nil {
		return nil, fmt.Errorf("election %q: campaign: %w", e.name, err)
	}
	return &Term{l: l, value: value}, nil
}

// Leader is who leads an election.
type Leader struct {
	// Value is what the leader gave Campaign.
	Value string
	// Fence is the fence of its term.
	Fence uint64
}

// Leader returns the current leader, or an error matching ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	info, err := e.c.Inspect(ctx, e.key)
	if err != nil {
		return Leader{}, fmt.Errorf("election %q: leader: %w", e.name, err)
	}
	if !info.Held {
		return Leader{}, fmt.Errorf("election %q: %w", e.name, ErrNoLeader)
	}
	return Leader{Value: info.Meta.Labels[ValueLabel], Fence: info.Fence}, nil
}

// Observe sends the leader each time it changes (a zero Leader when nobody
// leads), beginning with the current one, until ctx ends; then it closes
// the channel. It asks the store every poll interval (one Inspect): the
// backends' release notices are made for waiters, and some give a watcher
// a place in the key's queue, where an observer must not stand. A term
// shorter than the interval may go unseen, but the terms it sends come in
// order: a fence is never lower than the one before. Store errors are
// retried at the next poll. A receiver that falls behind makes Observe
// wait: it drops nothing.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	go e.observe(ctx, out)
	return out
}

// observe is Observe's loop.
func (e *Election) observe(ctx context.Context, out chan<- Leader) {
	defer close(out)
	t := time.NewTimer(0)
	defer t.Stop()
	var last Leader
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur, err := e.Leader(ctx)
		switch {
		case errors.Is(err, ErrNoLeader):
			cur = Leader{}
		case err != nil:
			t.Reset(e.poll)
			continue
		}
		// A read older than the last one sent (a replica behind) is skipped.
		if first || cur != last && (cur.Fence == 0 || cur.Fence >= last.Fence) {
			first, last = false, cur
			select {
			case out <- cur:
			case <-ctx.Done():
				return
			}
		}
		t.Reset(e.poll)
	}
}

// Term is a leader's term: the election's lock, held by this candidate.
type Term struct {
	l     *distlock.Lock
	value string
}

// Value returns what the leader gave Campaign.
func (t *Term) Value() string { return t.value }

// Fence returns the term's fence: higher than every earlier term's.
func (t *Term) Fence() uint64 { return t.l.Fence() }

// Done is closed when the term ends: resigned, or lost (the lease ran out
// unrenewed, the store dropped the lock, the max hold was reached).
func (t *Term) Done() <-chan struct{} { return t.l.Done() }

// Err returns nil while the term lasts, then why it ended: an error
// matching distlock.ErrLockLost when it was lost.
func (t *Term) Err() error { return t.l.Err() }

// Context returns a context that ends with the term, for the leader's work.
func (t *Term) Context() context.Context { return t.l.Context() }

// Lock returns the term's lock.
func (t *Term) Lock() *distlock.Lock { return t.l }

// Resign ends the term and lets the next candidate lead at once.
func (t *Term) Resign(ctx context.Context) error { return t.l.Release(ctx) }
