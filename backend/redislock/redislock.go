package redislock

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// Backend is a distlock backend on one Redis deployment (a single node,
// Sentinel or Cluster). It is safe for concurrent use.
type Backend struct {
	st            store
	prefix        string
	timeout       time.Duration // per request
	waiterTimeout time.Duration
	release       script // scriptRelease, or scriptReleaseWatched (WithWatchedReleases)
	ack           replicaAck
	// id names the backend among the waiters of every key, and its notice
	// channel, channels + id.
	id       string
	channels string
	inbox    *inbox
	holders  holders  // this backend's locks, for lost notices (lost.go)
	tracker  *tracker // reads held keys tracked (track.go), if the store can

	closed    atomic.Bool
	mu        sync.Mutex // orders waits.Add before Close's waits.Wait
	waits     sync.WaitGroup
	closing   context.Context // cancelled by Close: ends the waits
	stopWaits context.CancelFunc
}

var (
	_ driver.Backend    = (*Backend)(nil)
	_ driver.Waiter     = (*Backend)(nil)
	_ driver.Lister     = (*Backend)(nil)
	_ driver.PageLister = (*Backend)(nil)
	_ driver.Namer      = (*Backend)(nil)
	_ driver.Handoff    = (*Backend)(nil)

	_ driver.ForceReleaser    = (*Backend)(nil)
	_ driver.ReleaseRequester = (*Backend)(nil)
)

// newBackend checks the server version within ctx and the request timeout,
// then starts the backend on st.
func newBackend(ctx context.Context, st store, cfg config) (*Backend, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.requestTimeout)
	defer cancel()
	if err := checkVersion(ctx, st); err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = crand.Read(id[:]) // crypto/rand.Read never fails
	b := &Backend{st: st, prefix: cfg.prefix, timeout: cfg.requestTimeout, waiterTimeout: cfg.waiterTimeout,
		release: scriptRelease, ack: cfg.ack, id: hex.EncodeToString(id[:]), channels: cfg.prefix + "notify:"}
	if cfg.watchedReleases {
		b.release = scriptReleaseWatched
	}
	b.inbox = newInbox(st, b.channels+b.id, b.channels+lostChannel, cfg.requestTimeout, b.holders.notice, b.readMissedRequests)
	b.closing, b.stopWaits = context.WithCancel(context.Background())
	if kt, ok := st.(interface {
		keyTracker
		tracker() *tracker
	}); ok && kt.tracker() != nil {
		b.tracker = kt.tracker()
		b.tracker.start(kt.readTracked, &b.holders, func(key string) string { return b.prefix + "{" + escapeKey(key) + "}" }, cfg.requestTimeout, b.closing)
	}
	return b, nil
}

// enterWait counts a wait in, unless the backend is closed.
func (b *Backend) enterWait() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return false
	}
	b.waits.Add(1)
	return true
}

// evalInt runs s within the request timeout; see call.
func (b *Backend) evalInt(ctx context.Context, s script, keys []string, args ...string) (n int64, err error) {
	err = b.call(ctx, func(ctx context.Context) error {
		n, err = b.st.evalInt(ctx, s, keys, args...)
		return err
	})
	return n, err
}

// evalStrings runs s within the request timeout; see call.
func (b *Backend) evalStrings(ctx context.Context, s script, keys []string, args ...string) (r []string, err error) {
	err = b.call(ctx, func(ctx context.Context) error {
		r, err = b.st.evalStrings(ctx, s, keys, args...)
		return err
	})
	return r, err
}

// call runs one request, bounded by the request timeout unless ctx ends
// sooner; see run.
func (b *Backend) call(ctx context.Context, req func(context.Context) error) error {
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > b.timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.timeout)
		defer cancel()
	}
	return b.run(ctx, req)
}

// run runs req unless the backend is closed. After Close, or once the client
// was closed, it returns an error matching driver.ErrClosed.
func (b *Backend) run(ctx context.Context, req func(context.Context) error) error {
	if b.closed.Load() {
		return driver.ErrClosed
	}
	return b.runClosing(ctx, req)
}

// runClosing runs req even while Close waits for the waits to leave their
// queues. Once the client was closed it returns an error matching
// driver.ErrClosed.
func (b *Backend) runClosing(ctx context.Context, req func(context.Context) error) error {
	err := req(ctx)
	if err != nil && b.st.closedErr(err) {
		return fmt.Errorf("%w: %w", driver.ErrClosed, err)
	}
	return err
}

// Name returns "redis".
func (b *Backend) Name() string { return "redis" }

// Acquire takes req.Key for req.Token with one script: SET NX PX, and the
// fence counter advanced to max(last+1, server time in µs) in the same step.
// Its Lost context ends as soon as a forced release removes the hold. With
// WithReplicaAck, WAIT follows the script on its connection, and a grant
// the replicas did not acknowledge is released and refused
// (*ReplicaAckError).
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	fence, err := b.grant(ctx, req, "")
	switch {
	case err != nil:
		return driver.Grant{}, driver.Wrap("redislock", err)
	case fence <= 0:
		return driver.Grant{}, driver.ErrNotAcquired
	}
	return b.granted(driver.Grant{Fence: uint64(fence)}, nil, req)
}

// Handoff gives key to next.Token, with a new fence and next's time to live
// and metadata, if token holds it: the acquire script, run on the condition
// that token holds the key instead of that nobody does. No release notice is
// published, since the key is never free. With WithReplicaAck, a handover
// the replicas did not acknowledge is released, leaving the key free, and
// refused (*ReplicaAckError, matching driver.ErrNotAcquired).
func (b *Backend) Handoff(ctx context.Context, key, token string, next driver.AcquireRequest) (driver.Grant, error) {
	var fence int64
	err := validRequest(key, token, nil)
	if err == nil && next.Key != key {
		err = fmt.Errorf("%w: handed over as %q", driver.ErrInvalidOption, next.Key)
	}
	if err == nil {
		fence, err = b.grant(ctx, next, token)
	}
	switch {
	case err != nil:
		return driver.Grant{}, driver.Wrap("redislock", err)
	case fence <= 0:
		return driver.Grant{}, driver.ErrNotHeld
	}
	b.holders.forget(key, token)
	return b.granted(driver.Grant{Fence: uint64(fence)}, nil, next)
}

// grant runs the acquire script for req, handed over from token from if it
// is not empty, and returns the fence, or 0 if the key was not granted.
func (b *Backend) grant(ctx context.Context, req driver.AcquireRequest, from string) (int64, error) {
	if err := validRequest(req.Key, req.Token, &req.TTL); err != nil {
		return 0, err
	}
	meta, err := encodeMeta(req.Meta)
	if err != nil {
		return 0, err
	}
	lock, fence, metaName := b.lockNames(req.Key)
	keys, args := []string{lock, fence, metaName}, []string{req.Token, millis(req.TTL), meta, from}
	if meta == "" && from == "" { // the common case: a shorter request
		keys, args = keys[:2], args[:2]
	}
	if !b.acks() {
		return b.evalInt(ctx, scriptAcquire, keys, args...)
	}
	n, acked, wait, err := b.evalIntAcked(ctx, scriptAcquire, keys, args...)
	if err != nil || n <= 0 || acked >= b.ack.replicas {
		return n, err
	}
	return 0, b.refuseUnacked(ctx, req.Key, req.Token, acked, wait)
}

// Renew resets key's time to live to ttl if token holds it, and keeps its
// fence counter at least a minute beyond it. With WithReplicaAck, WAIT
// follows on the same connection, and a renewal the replicas did not
// acknowledge returns a *ReplicaAckError.
func (b *Backend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := validRequest(key, token, &ttl); err != nil {
		return driver.Wrap("redislock", err)
	}
	lock, fence, meta := b.lockNames(key)
	var ok int64
	var err error
	if b.acks() {
		var acked int
		var wait time.Duration
		ok, acked, wait, err = b.evalIntAcked(ctx, scriptRenew, []string{lock, meta, fence}, token, millis(ttl))
		if err == nil && ok == 1 && acked < b.ack.replicas {
			return &ReplicaAckError{Renewal: true, Acked: acked, Want: b.ack.replicas, Waited: wait}
		}
	} else {
		ok, err = b.evalInt(ctx, scriptRenew, []string{lock, meta, fence}, token, millis(ttl))
	}
	switch err := held(ok, err); {
	case err == nil:
		b.holders.renewed(key, token, ttl)
		b.listenForLoss() // after a lost subscription
		return nil
	case errors.Is(err, driver.ErrNotHeld):
		b.holders.forget(key, token)
		return err
	default:
		return err
	}
}

// Release frees key if token holds it. If another waiter of this backend
// waits for the key, the key passes straight to it in the same script (at
// most 16 times in a row while other clients' waiters are queued). Else, if
// waiters are queued in Redis, the key passes to the first live one: a
// waiter of this backend gets the grant at once, in process; another
// client's waiter is granted the key and told so on its client's channel.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	if err := validRequest(key, token, nil); err != nil {
		return driver.Wrap("redislock", err)
	}
	b.holders.forget(key, token)
	k := b.keysFor(key).all()
	args := []string{b.channels, token, b.id}
	next, passOver, ok := b.inbox.first(key)
	if ok {
		args = append(args, next.token, next.ttl, next.meta, next.member, "")
		if passOver {
			args[len(args)-1] = "1"
		}
	}
	sent := time.Now() // no later than a grant to a waiter of ours
	r, err := b.evalStrings(ctx, b.release, k, args...)
	if err == nil && (len(r) == 0 || r[0] == "2" && len(r) != 4) {
		err = fmt.Errorf("release script returned %q", r)
	}
	if err != nil {
		return driver.Wrap("redislock", err)
	}
	switch r[0] {
	case "0":
		return driver.ErrNotHeld
	case "1":
		b.inbox.released(key)
		return nil
	}
	// Granted to a waiter of ours.
	fence, err := strconv.ParseUint(r[2], 10, 64)
	if err == nil && b.inbox.grant(key, r[1], driver.Grant{Fence: fence, Sent: sent}, r[3] == "1") {
		return nil
	}
	// The waiter stopped waiting meanwhile: free the key for the next one.
	// (The grant took its entry out of the queue.)
	if err := b.leave(ctx, k, nextWaiter{token: r[1]}); err != nil {
		return handOnFailed(err)
	}
	return nil
}

// handOnFailed is Release's error when the key was released but the grant
// its waiter left could not be handed on: the failure err first, which
// names the backend or starts with its sentinel, then what it stopped.
func handOnFailed(err error) error {
	return fmt.Errorf("%w (the key was released; the grant its waiter left was not handed on)", driver.Wrap("redislock", err))
}

func held(ok int64, err error) error {
	switch {
	case err != nil:
		return driver.Wrap("redislock", err)
	case ok != 1:
		return driver.ErrNotHeld
	}
	return nil
}

// Inspect reports whether key is held, its fence (of the holder, or of the
// last grant), the time to live left (PTTL) and the holder's metadata.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Info{}, err
	}
	lock, fence, meta := b.lockNames(key)
	r, err := b.evalStrings(ctx, scriptInspect, []string{lock, fence, meta})
	info, err := parseInfo(key, r, err)
	if err != nil {
		return driver.Info{}, driver.Wrap("redislock", err)
	}
	return info, nil
}

// ForceRelease deletes key whatever token holds it, in one script, and
// returns what it held: fence, time to live left, metadata. If waiters are
// queued, the key passes to the first live one, as a release by another
// client passes it. The fence counter
// stays, so the next grant gets a higher fence; the old holder's Renew and
// Release get driver.ErrNotHeld. A free key is left as it is, with an error
// matching driver.ErrNotHeld.
func (b *Backend) ForceRelease(ctx context.Context, key string, _ driver.ForceOptions) (driver.Info, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Info{}, err
	}
	k := b.keysFor(key)
	r, err := b.evalStrings(ctx, scriptForceRelease, k.all(), b.channels, key)
	info, err := parseInfo(key, r, err)
	switch {
	case err != nil:
		return driver.Info{}, driver.Wrap("redislock", err)
	case !info.Held:
		return driver.Info{}, driver.ErrNotHeld
	}
	return info, nil
}

// RequestRelease asks key's holder to release it, in one script that
// publishes its token and reason on the channel every holding backend
// listens on, and returns what the key holds. It also records the request
// for as long as the lock lives, for a holder whose subscription was not up:
// the holder reads it once it subscribes. A free key gets an error matching
// driver.ErrNotHeld and changes nothing.
func (b *Backend) RequestRelease(ctx context.Context, key, reason string) (driver.Info, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Info{}, err
	}
	lock, fence, meta := b.lockNames(key)
	r, err := b.evalStrings(ctx, scriptRequestRelease, []string{lock, fence, meta, b.requestName(key)}, b.channels, reason)
	info, err := parseInfo(key, r, err)
	switch {
	case err != nil:
		return driver.Info{}, driver.Wrap("redislock", err)
	case !info.Held:
		return driver.Info{}, driver.ErrNotHeld
	}
	return info, nil
}

// parseInfo reads the reply of inspect.lua, forcerelease.lua or
// request.lua, r, or returns err.
func parseInfo(key string, r []string, err error) (driver.Info, error) {
	if err == nil && len(r) != 4 {
		err = fmt.Errorf("script returned %d values, want 4", len(r))
	}
	if err != nil {
		return driver.Info{}, err
	}
	info := driver.Info{Key: key, Held: r[0] == "1"}
	if r[1] != "" {
		if info.Fence, err = strconv.ParseUint(r[1], 10, 64); err != nil {
			return driver.Info{}, fmt.Errorf("fence: %w", err)
		}
	}
	if ms, _ := strconv.ParseInt(r[2], 10, 64); info.Held && ms > 0 {
		info.TTL = time.Duration(ms) * time.Millisecond
	}
	if r[3] != "" {
		if err := json.Unmarshal([]byte(r[3]), &info.Meta); err != nil {
			return driver.Info{}, fmt.Errorf("metadata: %w", err)
		}
	}
	return info, nil
}

// List returns the held locks whose keys start with prefix, sorted by key. It
// SCANs every master for the lock names (Keys), then inspects each; it is
// meant for operators, not hot paths. The SCAN loop is bounded by ctx and the
// client's own timeouts; each Inspect by the request timeout as well.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	keys, err := b.Keys(ctx, prefix)
	if err != nil {
		return nil, err
	}
	return b.inspectHeld(ctx, keys, len(keys))
}

// ListPage returns, sorted by key, at most limit held locks whose keys start
// with prefix and sort after after. Redis keeps no order of names to read a
// page from, so it SCANs the lock names of the prefix as List does (Keys),
// then inspects the keys after after in order until limit are held: one
// Inspect per lock of the page, plus one per key freed since the SCAN,
// where List inspects every key of the prefix.
func (b *Backend) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d, want at least 1", driver.ErrInvalidOption, limit)
	}
	keys, err := b.Keys(ctx, prefix)
	if err != nil {
		return nil, err
	}
	i, found := slices.BinarySearch(keys, after)
	if found {
		i++
	}
	return b.inspectHeld(ctx, keys[i:], limit)
}

// Keys returns, sorted bytewise, the keys starting with prefix that have a
// lock name in Redis, found by one SCAN of every master (glob characters in
// prefix are escaped), without reading any lock: a key it returns may have
// been released since. The SCAN loop is bounded by ctx and the client's own
// timeouts, not by the request timeout.
func (b *Backend) Keys(ctx context.Context, prefix string) ([]string, error) {
	match := globEscape(b.prefix+"{"+escapeKey(prefix)) + "*}"
	seen := make(map[string]bool)
	err := b.run(ctx, func(ctx context.Context) error {
		return b.st.scan(ctx, match, func(name string) {
			if key, ok := b.keyFromLockName(name); ok && strings.HasPrefix(key, prefix) {
				seen[key] = true
			}
		})
	})
	if err != nil {
		return nil, driver.Wrap("redislock", err)
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// inspectHeld inspects keys in order and returns the first limit that are
// held.
func (b *Backend) inspectHeld(ctx context.Context, keys []string, limit int) ([]driver.Info, error) {
	infos := make([]driver.Info, 0, min(len(keys), limit))
	for _, key := range keys {
		if len(infos) == limit {
			break
		}
		info, err := b.Inspect(ctx, key)
		if err != nil {
			return nil, err
		}
		if info.Held {
			infos = append(infos, info)
		}
	}
	return infos, nil
}

// Close ends the waits of this backend (each leaves its queue, within the
// request timeout), closes the subscription connection and, if the backend
// built its client (Open), the client. A client passed to New or NewRueidis
// stays open. Every call after Close returns an error matching
// driver.ErrClosed, and so does every call once the client itself was
// closed. Closing twice is harmless.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed.Swap(true) {
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	b.stopWaits()
	b.waits.Wait()
	if b.tracker != nil {
		b.tracker.wait()
	}
	return errors.Join(b.inbox.close(), b.st.close())
}

// validRequest checks what the client validates already, so that a direct
// caller cannot send a bad request to Redis either. ttl is nil for a release.
func validRequest(key, token string, ttl *time.Duration) error {
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	switch {
	case token == "":
		return fmt.Errorf("%w: empty token", driver.ErrInvalidOption)
	case strings.Contains(token, "\n"):
		// The store appends "\n" to a holder's token to mark that others wait.
		return fmt.Errorf("%w: token %q contains a newline", driver.ErrInvalidOption, token)
	case ttl != nil && *ttl <= 0:
		return fmt.Errorf("%w: time to live %v must be positive", driver.ErrInvalidOption, *ttl)
	}
	return nil
}

// millis formats d in whole milliseconds, rounded up.
func millis(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

// encodeMeta returns m as JSON, or "" if it is empty.
func encodeMeta(m driver.Meta) (string, error) {
	if m.Owner == "" && m.BusinessID == "" && len(m.Labels) == 0 {
		return "", nil
	}
	j, err := json.Marshal(m)
	return string(j), err
}
