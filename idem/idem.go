package idem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
)

// KeyPrefix is prefixed to an idempotency key to make the key of the lock
// that holds its in-progress attempt.
const KeyPrefix = "idem/"

// Defaults of the options.
const (
	DefaultRetention = 24 * time.Hour
	DefaultWait      = 30 * time.Second
)

var (
	// ErrConflict is matched by the error of a request whose payload differs
	// from the one recorded under the same key.
	ErrConflict = errors.New("idem: key reused with a different request")
	// ErrFailed is matched by the error of a call whose fn returned a stored
	// failure (see Fail), first run and replays alike.
	ErrFailed = errors.New("idem: request failed")
	// ErrSuperseded is matched by the error of an attempt whose result was
	// not recorded: its lock was lost during fn, or another attempt of the
	// same key, which a lost lock let run at the same time, recorded its
	// result first.
	ErrSuperseded = errors.New("idem: attempt superseded")
	// ErrPanicked is matched by the error of an fn that panicked; nothing is
	// recorded and a retry may run.
	ErrPanicked = errors.New("idem: fn panicked")
)

// Func is the work done at most once to completion per key. Its context ends
// when the caller's does or when the attempt's lock is lost; fence is the
// lock's fence, strictly increasing per key across attempts, for fencing the
// side effect (package fence). It returns the result recorded for the key, or
// an error: one made by Fail is recorded as a failure, any other is not
// recorded and leaves the key free for a retry.
type Func func(ctx context.Context, fence uint64) ([]byte, error)

// Fail returns an error that makes Do record a failure: value is what every
// duplicate gets back, with an error matching ErrFailed.
func Fail(value []byte, err error) error { return &failure{value: value, err: err} }

type failure struct {
	value []byte
	err   error
}

func (f *failure) Error() string   { return fmt.Sprintf("%v: %v", ErrFailed, f.err) }
func (f *failure) Unwrap() []error { return []error{ErrFailed, f.err} }

// Result is the outcome recorded for a key.
type Result struct {
	// Value is what fn returned, or the value given to Fail.
	Value []byte
	// Failed marks a recorded failure.
	Failed bool
	// Fence is the fence of the attempt that produced the result.
	Fence uint64
	// Replayed is true when this call did not run fn but returned a result
	// recorded before.
	Replayed bool
}

// Keeper runs functions at most once to completion per idempotency key,
// across every replica that shares its lock store and its Store. It is safe
// for concurrent use.
type Keeper struct {
	client    *distlock.Client
	store     Store
	retention time.Duration
	wait      time.Duration
	lockOpts  []distlock.Option
	log       *slog.Logger

	executions, replays, conflicts, waits, failures, superseded atomic.Uint64
}

// Option configures a Keeper.
type Option func(*Keeper)

// WithRetention sets how long a result is kept and replayed. The default is
// DefaultRetention; it must be positive.
func WithRetention(d time.Duration) Option { return func(k *Keeper) { k.retention = d } }

// WithWait bounds how long a duplicate waits for an attempt in progress; the
// caller's context bounds it too. The default is DefaultWait; it must be
// positive.
func WithWait(d time.Duration) Option { return func(k *Keeper) { k.wait = d } }

// WithLockOptions sets options of the attempt's lock, such as
// distlock.WithLease with distlock.WithWatchdog(true): the lease is how long
// a crashed attempt blocks its key. The default is none: distlock's default
// lease, renewed while fn runs. A distlock.WithWait among them is overridden
// by the Keeper's own wait.
func WithLockOptions(opts ...distlock.Option) Option {
	return func(k *Keeper) { k.lockOpts = append(k.lockOpts, opts...) }
}

// WithLogger logs, at Warn, the calls refused for a conflicting request and
// the results not recorded because their attempt was superseded, with the
// key and the fence. The default is none.
func WithLogger(l *slog.Logger) Option { return func(k *Keeper) { k.log = l } }

// New returns a Keeper that records results in store and holds attempts in
// progress with locks of client. Every replica must use the same lock store
// and the same Store.
func New(client *distlock.Client, store Store, opts ...Option) (*Keeper, error) {
	if client == nil || store == nil {
		return nil, fmt.Errorf("idem: New: %w: client and store are required", distlock.ErrInvalidOption)
	}
	k := &Keeper{client: client, store: store, retention: DefaultRetention, wait: DefaultWait}
	for _, o := range opts {
		o(k)
	}
	switch {
	case k.retention <= 0:
		return nil, fmt.Errorf("idem: New: %w: retention %v must be positive", distlock.ErrInvalidOption, k.retention)
	case k.wait <= 0:
		return nil, fmt.Errorf("idem: New: %w: wait %v must be positive", distlock.ErrInvalidOption, k.wait)
	}
	return k, nil
}

// Retention returns how long results are kept.
func (k *Keeper) Retention() time.Duration { return k.retention }

// Do runs fn for key unless a result is recorded for it, and returns the
// recorded result. key must be non-empty, and KeyPrefix+key a valid lock key
// (distlock.ValidateKey); else the error matches distlock.ErrInvalidKey.
//
//   - A result recorded for the same request is returned at once (Replayed),
//     with an error matching ErrFailed if it is a failure.
//   - A result recorded for a different request (its SHA-256 differs) gives
//     an error matching ErrConflict.
//   - While another attempt of key is in progress anywhere, Do waits for it,
//     up to WithWait and ctx, and returns its result; if it ends without a
//     result (an unrecorded error, a crash past its lease), Do runs fn itself.
//   - Otherwise Do runs fn under the key's lock and records its result, or its
//     failure if fn returned Fail. Any other error of fn is returned and
//     nothing is recorded. If the lock was lost during fn, or another attempt
//     recorded first, the result is not recorded and the error matches
//     ErrSuperseded.
func (k *Keeper) Do(ctx context.Context, key string, request []byte, fn Func) (Result, error) {
	return k.DoCommit(ctx, key, request, fn, func(ctx context.Context, r Record) (bool, error) {
		return k.store.Put(ctx, key, r, k.retention)
	})
}

// Commit records r for its key and reports whether it did; false means a
// live record was there and nothing changed.
// Stores use it to write a record in the caller's transaction.
type Commit func(ctx context.Context, r Record) (bool, error)

// DoCommit is Do with the final write done by commit instead of Store.Put,
// still under the key's lock: the transactional forms of the SQL stores
// write the record and commit the caller's transaction in it.
func (k *Keeper) DoCommit(ctx context.Context, key string, request []byte, fn Func, commit Commit) (Result, error) {
	if fn == nil || commit == nil {
		return Result{}, keyErr("do", key, fmt.Errorf("%w: fn and commit are required", distlock.ErrInvalidOption))
	}
	if key == "" {
		return Result{}, keyErr("do", key, fmt.Errorf("%w: empty", distlock.ErrInvalidKey))
	}
	if err := distlock.ValidateKey(KeyPrefix + key); err != nil {
		return Result{}, keyErr("do", key, err)
	}
	hash := sha256.Sum256(request)
	if r, ok, err := k.replay(ctx, key, hash); ok || err != nil {
		return r, err
	}
	lockKey := KeyPrefix + key
	l, err := k.client.TryLock(ctx, lockKey, k.lockOpts...)
	if errors.Is(err, distlock.ErrNotAcquired) {
		k.waits.Add(1)
		opts := append(k.lockOpts[:len(k.lockOpts):len(k.lockOpts)], distlock.WithWait(k.wait))
		l, err = k.client.Lock(ctx, lockKey, opts...)
	}
	if err != nil {
		return Result{}, keyErr("do", key, err)
	}
	defer release(ctx, l)
	// Recorded by the attempt we waited for, or between our read and our lock.
	if r, ok, err := k.replay(ctx, key, hash); ok || err != nil {
		return r, err
	}
	return k.run(ctx, key, hash, l, fn, commit)
}

// replay returns the result recorded for key, if any.
func (k *Keeper) replay(ctx context.Context, key string, hash [32]byte) (Result, bool, error) {
	rec, ok, err := k.store.Get(ctx, key)
	if err != nil {
		return Result{}, false, keyErr("do", key, err)
	}
	if !ok {
		return Result{}, false, nil
	}
	if !bytes.Equal(rec.Hash[:], hash[:]) {
		k.conflicts.Add(1)
		k.warn(ctx, "idem: request differs from the recorded one", key, rec.Fence, ErrConflict)
		return Result{}, true, keyErr("do", key, ErrConflict)
	}
	k.replays.Add(1)
	r := Result{Value: rec.Value, Failed: rec.Failed, Fence: rec.Fence, Replayed: true}
	if rec.Failed {
		return r, true, keyErr("do", key, ErrFailed)
	}
	return r, true, nil
}

// run runs fn under l and commits its result unless l was lost meanwhile.
func (k *Keeper) run(ctx context.Context, key string, hash [32]byte, l *distlock.Lock, fn Func, commit Commit) (Result, error) {
	k.executions.Add(1)
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.Context(), func() { cancel(l.Err()) }) // a lost lock ends fn
	v, err := safeRun(fctx, l.Fence(), fn)
	stop()
	cancel(nil)
	var f *failure
	switch {
	case errors.As(err, &f):
		k.failures.Add(1)
		v = f.value
	case err != nil:
		return Result{}, keyErr("do", key, err)
	}
	if lerr := l.Err(); lerr != nil {
		k.superseded.Add(1)
		k.warn(ctx, "idem: result not recorded: lock lost", key, l.Fence(), lerr)
		return Result{}, keyErr("do", key, errors.Join(ErrSuperseded, lerr))
	}
	rec := Record{Hash: hash, Value: v, Failed: f != nil, Fence: l.Fence()}
	ok, cerr := commit(ctx, rec)
	switch {
	case cerr != nil:
		return Result{}, keyErr("do", key, fmt.Errorf("record: %w", cerr))
	case !ok:
		k.superseded.Add(1)
		k.warn(ctx, "idem: result not recorded: another attempt recorded first", key, l.Fence(), ErrSuperseded)
		return Result{}, keyErr("do", key, ErrSuperseded)
	}
	r := Result{Value: v, Failed: f != nil, Fence: l.Fence()}
	if f != nil {
		return r, keyErr("do", key, err)
	}
	return r, nil
}

func (k *Keeper) warn(ctx context.Context, msg, key string, fence uint64, err error) {
	if k.log != nil {
		k.log.WarnContext(ctx, msg, "key", key, "fence", fence, "err", err)
	}
}

// safeRun runs fn, turning a panic into an error matching ErrPanicked.
func safeRun(ctx context.Context, fence uint64, fn Func) (v []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("%w: %v\n%s", ErrPanicked, p, debug.Stack())
		}
	}()
	return fn(ctx, fence)
}

// release releases l with a context that outlives a cancelled caller's. A
// failed release only delays the key's next attempt until the lease ends,
// and every result is already recorded or refused; it is not reported.
func release(ctx context.Context, l *distlock.Lock) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), distlock.ReleaseBudget)
	defer cancel()
	_ = l.Release(rctx)
}

// Stats counts what a Keeper did since New.
type Stats struct {
	Executions uint64 // fn runs
	Replays    uint64 // calls answered with a recorded result
	Conflicts  uint64 // calls refused for a different request under a recorded key
	Waits      uint64 // calls that found an attempt in progress and waited for it
	Failures   uint64 // fn runs that returned Fail
	Superseded uint64 // results not recorded: lock lost, or another attempt recorded first
}

// Stats returns the counts so far.
func (k *Keeper) Stats() Stats {
	return Stats{Executions: k.executions.Load(), Replays: k.replays.Load(), Conflicts: k.conflicts.Load(),
		Waits: k.waits.Load(), Failures: k.failures.Load(), Superseded: k.superseded.Load()}
}

// KeyError is an error about one idempotency key.
type KeyError struct {
	Op  string
	Key string
	Err error
}

func (e *KeyError) Error() string { return fmt.Sprintf("idem: %s %q: %v", e.Op, e.Key, e.Err) }

// Unwrap returns the cause.
func (e *KeyError) Unwrap() error { return e.Err }

func keyErr(op, key string, err error) error { return &KeyError{Op: op, Key: key, Err: err} }
