package locktest

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// foreignToken is a well-formed token that holds no key.
const foreignToken = "00000000000000000000000000000000"

// errorsSayEachThingOnce: the errors a client returns for the backend's
// refusals name the operation and the key once, and carry the sentinel's
// text and "distlock:" once: a backend adds what only it knows, never the
// operation, the key or the sentinel again. The backend's own errors, as
// the client gets them, repeat nothing either.
func (s *suite) errorsSayEachThingOnce(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	l := mustLock(t, ctx, a, key)
	defer l.Release(ctx)

	// once checks a client's error of op on k: each said exactly once.
	once := func(what, op, k string, want error, err error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: got %v, want %v", what, err, want)
			return
		}
		sayOnce(t, what, op, k, want, err, true)
	}
	_, err := b.TryLock(ctx, key)
	once("try a held key", "lock", key, distlock.ErrNotAcquired, err)
	_, err = b.Lock(ctx, key, distlock.WithWait(100*time.Millisecond))
	once("wait for a held key past the wait", "lock", key, distlock.ErrNotAcquired, err)
	once("release by a foreign token", "release", key, distlock.ErrNotHeld, b.ReleaseToken(ctx, key, foreignToken))
	once("renew by a foreign token", "renew", key, distlock.ErrNotHeld, b.RenewToken(ctx, key, foreignToken, time.Minute))
	sayOnce(t, "the backend's release by a foreign token", "release", key, distlock.ErrNotHeld,
		b.Backend().Release(ctx, key, foreignToken), false)
	sayOnce(t, "the backend's renew by a foreign token", "renew", key, distlock.ErrNotHeld,
		b.Backend().Renew(ctx, key, foreignToken, time.Minute), false)

	free := key + "/free"
	_, err = a.ForceRelease(ctx, free, "locktest: nothing there")
	if errors.Is(err, errors.ErrUnsupported) {
		once("force release where unsupported", "force release", free, errors.ErrUnsupported, err)
	} else {
		once("force release of a free key", "force release", free, distlock.ErrNotHeld, err)
	}

	bad := key + "\n"
	_, err = b.TryLock(ctx, bad)
	once("lock of an invalid key", "lock", bad, distlock.ErrInvalidKey, err)
	if s.h.MaxKeyLen < distlock.MaxKeyLen {
		long := strings.Repeat("k", s.h.MaxKeyLen+1)
		_, err = b.TryLock(ctx, long)
		once("lock of a key over the backend's maximum", "lock", long, distlock.ErrInvalidKey, err)
	}

	_, err = b.TryLock(ctx, key+"/option", distlock.WithLease(-time.Second))
	once("lock with an invalid option", "lock", key+"/option", distlock.ErrInvalidOption, err)

	done := key + "/released"
	l2 := mustLock(t, ctx, b, done)
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	once("release of a released lock", "release", done, distlock.ErrNotHeld, l2.Release(ctx))
	once("renew of a released lock", "renew", done, distlock.ErrNotHeld, l2.Renew(ctx))

	// A backend closed under its client: each call reaches the closed backend.
	bb := s.h.NewBackend(t)
	c := distlock.New(bb)
	closedKey := key + "/closed"
	// The default lease: the calls below must end before it does, or the
	// client reports the lock expired without asking the closed backend.
	l3 := mustLock(t, ctx, c, closedKey)
	if err := bb.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = c.TryLock(ctx, closedKey+"/2")
	once("lock on a closed backend", "lock", closedKey+"/2", distlock.ErrClosed, err)
	_, err = c.Inspect(ctx, closedKey)
	once("inspect on a closed backend", "inspect", closedKey, distlock.ErrClosed, err)
	once("renew on a closed backend", "renew", closedKey, distlock.ErrClosed, c.RenewToken(ctx, closedKey, l3.Token(), time.Minute))
	once("release on a closed backend", "release", closedKey, distlock.ErrClosed, l3.Release(ctx))
	sayOnce(t, "the closed backend's release", "release", closedKey, distlock.ErrClosed, bb.Release(ctx, closedKey, l3.Token()), false)
	_ = c.Close()
	_, err = c.TryLock(ctx, closedKey)
	once("lock on a closed client", "lock", closedKey, distlock.ErrClosed, err)
}

// sayOnce fails t if err's text names the key k (as %q shows it), the
// operation op, the sentinel want's text or "distlock:" more than once; if
// exact, also if it names any of them less than once. The operation is
// counted as a word outside the key, so that neither "released" nor a key
// containing the word counts.
func sayOnce(t *testing.T, what, op, k string, want, err error, exact bool) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", what, want)
		return
	}
	msg := err.Error()
	quoted := strconv.Quote(k)
	named := quoted[1 : len(quoted)-1] // as %q shows it, without the quotes
	rest := strings.ReplaceAll(msg, named, "")
	counts := []struct {
		thing string
		n     int
	}{
		{"the key", strings.Count(msg, named)},
		{"the operation " + strconv.Quote(op), len(regexp.MustCompile(`\b`+regexp.QuoteMeta(op)+`\b`).FindAllStringIndex(rest, -1))},
		{"the sentinel's text " + strconv.Quote(sentinelText(want)), strings.Count(rest, sentinelText(want))},
		{`"distlock:"`, strings.Count(rest, "distlock:")},
	}
	for _, c := range counts {
		if c.n > 1 || exact && c.n < 1 {
			t.Errorf("%s: %q names %s %d times, want once", what, msg, c.thing, c.n)
		}
	}
}

// sentinelText is a sentinel's text without the package's prefix.
func sentinelText(err error) string {
	return strings.TrimPrefix(err.Error(), "distlock: ")
}
