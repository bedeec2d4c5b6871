package distlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
)

// RWMutex is a read-write lock on one name across every client of the
// store: readers share it, a writer holds it alone, and a writer that waits
// keeps new readers out, so writers are not starved by a stream of readers.
// Each hold, read or write, is a *Lock with everything a lock has: a token,
// a lease the watchdog renews, a loss notice (Done, Err, Context), a fence
// (one sequence for both modes: a writer's fence is above every reader's
// before it) and Release.
//
// Create it with Client.RWMutex, which needs a backend that keeps
// read-write locks (driver.RWLocks). It is safe for concurrent use.
type RWMutex struct {
	name    string
	rw      driver.RWLocks
	readers *Client // holds in driver.Shared mode, over an rwBackend
	writers *Client // holds in driver.Exclusive mode
}

// RWInfo is what the store holds of a read-write lock.
type RWInfo struct {
	// Writer reports that Held is one writer's hold; otherwise Held are
	// readers' holds (none if free).
	Writer bool
	// Held are the live holds (key, fence, time to live, metadata).
	Held []Info
	// WritersWaiting counts writers whose wait keeps new readers out.
	WritersWaiting int
}

// RWMutex returns a handle on the read-write lock name. It fails with
// errors.ErrUnsupported if the backend keeps no read-write locks, and with
// ErrInvalidKey on a bad name. Close the handle when done (Client.Close
// closes it too).
func (c *Client) RWMutex(name string) (*RWMutex, error) {
	if err := driver.ValidateKey(name); err != nil {
		return nil, keyErr("rwmutex", name, err)
	}
	rw, ok := c.backend.(driver.RWLocks)
	if !ok {
		return nil, keyErr("rwmutex", name, fmt.Errorf("%s keeps no read-write locks: %w", c.backendName, errors.ErrUnsupported))
	}
	readers, err := c.derive(rwHolds(rw, driver.Shared), "read-lock")
	if err != nil {
		return nil, keyErr("rwmutex", name, err)
	}
	writers, err := c.derive(rwHolds(rw, driver.Exclusive), "write-lock")
	if err != nil {
		_ = readers.Close()
		return nil, keyErr("rwmutex", name, err)
	}
	return &RWMutex{name: name, rw: rw, readers: readers, writers: writers}, nil
}

// Name returns the lock's name.
func (m *RWMutex) Name() string { return m.name }

// RLock takes a read hold, waiting while a writer holds the lock or waits
// for it: up to WithWait if given, else until ctx ends (ErrNotAcquired
// then). opts are a lock's.
func (m *RWMutex) RLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return m.readers.Lock(ctx, m.name, opts...)
}

// TryRLock makes one attempt to take a read hold.
func (m *RWMutex) TryRLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return m.readers.TryLock(ctx, m.name, opts...)
}

// Lock takes the write hold, waiting while anyone holds the lock: up to
// WithWait if given, else until ctx ends (ErrNotAcquired then). While it
// waits, new readers are kept out; readers already in finish first.
func (m *RWMutex) Lock(ctx context.Context, opts ...Option) (*Lock, error) {
	withIntent, done := m.writing(ctx)
	l, err := m.writers.Lock(ctx, m.name, append([]Option{withIntent}, opts...)...)
	done(err)
	return l, err
}

// writing returns the option that gives a writer's attempts a write
// intent, and the function to call with the outcome: a writer that did not
// get the lock withdraws its intent, letting the readers it kept out in now
// rather than at the intent's expiry.
func (m *RWMutex) writing(ctx context.Context) (Option, func(error)) {
	intent := newToken()
	return func(r *Request) { r.intent = intent }, func(err error) {
		if err != nil {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = m.rw.WithdrawIntent(wctx, m.name, intent)
			cancel()
		}
	}
}

// AcquireToken takes a hold, a writer's if write and else a reader's, for a
// holder elsewhere, as Client.AcquireToken takes a lock: the holder proves
// itself with token to RenewToken and ReleaseToken, on this handle or any
// other of the name, and the handle keeps nothing. A waiting writer keeps
// new readers out, as Lock's does.
func (m *RWMutex) AcquireToken(ctx context.Context, write bool, token string, opts ...Option) (TokenGrant, error) {
	if !write {
		return m.readers.AcquireToken(ctx, m.name, token, opts...)
	}
	var r Request
	for _, o := range opts {
		o(&r)
	}
	if r.intent != "" { // the caller's own (WithWriteIntent), which it withdraws
		return m.writers.AcquireToken(ctx, m.name, token, opts...)
	}
	withIntent, done := m.writing(ctx)
	g, err := m.writers.AcquireToken(ctx, m.name, token, append([]Option{withIntent}, opts...)...)
	done(err)
	return g, err
}

// WithdrawIntent ends the write intent id that a writer's attempt recorded
// (WithWriteIntent), letting the readers it kept out in; an intent that
// ended already is no error.
func (m *RWMutex) WithdrawIntent(ctx context.Context, id string) error {
	if err := m.rw.WithdrawIntent(ctx, m.name, id); err != nil {
		return keyErr("withdraw intent", m.name, err)
	}
	return nil
}

// RenewToken renews token's hold, of either mode, for lease from now;
// ErrNotHeld if token holds none.
func (m *RWMutex) RenewToken(ctx context.Context, token string, lease time.Duration) error {
	return m.readers.RenewToken(ctx, m.name, token, lease)
}

// ReleaseToken frees token's hold, of either mode; ErrNotHeld if token
// holds none.
func (m *RWMutex) ReleaseToken(ctx context.Context, token string) error {
	return m.readers.ReleaseToken(ctx, m.name, token)
}

// Downgrade turns l, a write hold of the lock, into a read hold, with no
// moment in which another writer could get in: readers may join it at
// once, while writers wait for it as for any reader. l stays the same Lock
// (its token, fence, lease, watchdog and loss notice carry on) and is
// released as before. A read hold is left as it is. It fails with ErrNotHeld
// if l no longer holds the lock, with ErrInvalidOption if l is not a hold of
// this lock's name, and with errors.ErrUnsupported if the backend cannot
// downgrade (driver.RWDowngrader).
func (m *RWMutex) Downgrade(ctx context.Context, l *Lock) error {
	if l.Key() != m.name {
		return keyErr("downgrade", m.name, fmt.Errorf("%w: the hold is of %q", ErrInvalidOption, l.Key()))
	}
	if err := l.Err(); err != nil {
		return keyErr("downgrade", m.name, err)
	}
	return m.DowngradeToken(ctx, l.Token())
}

// DowngradeToken is Downgrade for a write hold taken with AcquireToken:
// token's hold becomes a read hold, renewed and released with the same
// token.
func (m *RWMutex) DowngradeToken(ctx context.Context, token string) error {
	d, ok := m.rw.(driver.RWDowngrader)
	if !ok {
		return keyErr("downgrade", m.name, fmt.Errorf("%s cannot downgrade a hold: %w", m.readers.backendName, errors.ErrUnsupported))
	}
	if err := d.DowngradeRW(ctx, m.name, token); err != nil {
		return keyErr("downgrade", m.name, err)
	}
	return nil
}

// TryLock makes one attempt to take the write hold; refused, it keeps no
// reader out.
func (m *RWMutex) TryLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return m.writers.TryLock(ctx, m.name, opts...)
}

// Inspect returns the lock's live holds and waiting writers.
func (m *RWMutex) Inspect(ctx context.Context) (RWInfo, error) {
	mode, held, intents, err := m.rw.InspectRW(ctx, m.name)
	if err != nil {
		return RWInfo{}, keyErr("inspect", m.name, err)
	}
	return RWInfo{Writer: mode == driver.Exclusive && len(held) > 0, Held: held, WritersWaiting: intents}, nil
}

// Close releases the holds this handle has and ends its waits; the client
// and its backend stay open.
func (m *RWMutex) Close() error { return errors.Join(m.readers.Close(), m.writers.Close()) }

// rwBackend runs a read-write lock's holds of one mode through the
// client's machinery as if each were a lock on the name.
type rwBackend struct {
	rw   driver.RWLocks
	mode driver.Mode
}

var _ driver.Notifier = rwBackend{}

func (b rwBackend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.rw.AcquireRW(ctx, req, b.mode)
}

func (b rwBackend) Renew(ctx context.Context, name, token string, ttl time.Duration) error {
	return b.rw.RenewRW(ctx, name, token, ttl)
}

func (b rwBackend) Release(ctx context.Context, name, token string) error {
	return b.rw.ReleaseRW(ctx, name, token)
}

// Inspect reports the name held when a hold of this mode would be refused.
func (b rwBackend) Inspect(ctx context.Context, name string) (driver.Info, error) {
	mode, held, intents, err := b.rw.InspectRW(ctx, name)
	if err != nil {
		return driver.Info{}, err
	}
	refused := len(held) > 0
	if b.mode == driver.Shared {
		refused = (refused && mode == driver.Exclusive) || intents > 0
	}
	return driver.Info{Key: name, Held: refused}, nil
}

func (b rwBackend) Watch(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.rw.WatchRW(ctx, name)
}

// Close leaves the backend, which the parent client owns, open.
func (rwBackend) Close() error { return nil }

// rwHolds returns the backend of rw's holds in mode: an rwBackend, which
// also waits through rw if rw waits for holds itself (driver.RWWaiter).
func rwHolds(rw driver.RWLocks, mode driver.Mode) driver.Backend {
	b := rwBackend{rw: rw, mode: mode}
	if w, ok := rw.(driver.RWWaiter); ok {
		return waitingRW{b, w}
	}
	return b
}

// waitingRW is an rwBackend whose backend waits for holds itself: the
// client waits through AcquireWait, as for a lock in a store's queue.
type waitingRW struct {
	rwBackend
	w driver.RWWaiter
}

var _ driver.Waiter = waitingRW{}

func (b waitingRW) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.w.AcquireRWWait(ctx, req, b.mode)
}
