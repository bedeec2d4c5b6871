package natslock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/natslock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/testserver"
)

// TestRestartKeepsFences: with file storage, a hold survives a kill of the
// server, and fences keep increasing across a graceful restart and a kill,
// even once the stream is empty (every key released and purged).
func TestRestartKeepsFences(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	a, b := distlock.New(st.open(t)), distlock.New(st.open(t))
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	key := uniqueKey(t)
	held, err := a.TryLock(ctx, key, distlock.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st.servers[0].Kill()
	st.servers[0].Start()
	l, err := b.Lock(ctx, key, distlock.WithWait(2*time.Second))
	if err == nil {
		_ = l.Release(ctx)
		t.Fatal("a hold did not survive a kill of the server")
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("lock of a key held across a kill: %v, want ErrNotAcquired", err)
	}
	if err := retry(func() error { return held.Renew(ctx) }); err != nil {
		t.Fatalf("the holder's renewal after the restart: %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	last := held.Fence()
	for _, restart := range []func(){st.servers[0].Restart, func() { st.servers[0].Kill(); st.servers[0].Start() }} {
		// Nothing left in the stream: only its sequence keeps the next fence up.
		purgeStream(t, st)
		restart()
		var l *distlock.Lock
		if err := retry(func() (err error) { l, err = b.TryLock(ctx, key); return err }); err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d after a restart, not above %d before it", l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// purgeStream empties the bucket's stream.
func purgeStream(t *testing.T, st store) {
	t.Helper()
	s, err := st.js(t).Stream(testContext(t, 10*time.Second), "KV_"+st.bucket)
	if err == nil {
		err = s.Purge(testContext(t, 10*time.Second))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// retry calls f until it succeeds, for up to 10s: the client reconnects
// after a restart.
func retry(f func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPausedHolder: a holder that stops renewing past its lease (a paused
// process) loses the key to another client; its late renewal, release and
// repeated grant change nothing, and the next holder's fence is higher.
func TestPausedHolder(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	old, cur := st.open(t), st.open(t)
	key := uniqueKey(t)
	req := driver.AcquireRequest{Key: key, Token: token(), TTL: time.Second}
	g, err := old.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// The server keeps a hold for its whole seconds, then expires it on its
	// next pass.
	var g2 driver.Grant
	next := driver.AcquireRequest{Key: key, Token: token(), TTL: time.Minute}
	start := time.Now()
	for {
		if g2, err = cur.Acquire(ctx, next); err == nil {
			break
		}
		if !errors.Is(err, driver.ErrNotAcquired) || time.Since(start) > 5*time.Second {
			t.Fatalf("takeover after the lease: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if took := time.Since(start); took < time.Second-drift {
		t.Fatalf("taken over after %v, before the lease of 1s ended", took)
	}
	if g2.Fence <= g.Fence {
		t.Fatalf("fence %d after the takeover, not above %d", g2.Fence, g.Fence)
	}
	if err := old.Renew(ctx, key, req.Token, time.Minute); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("late renewal: %v, want ErrNotHeld", err)
	}
	if err := old.Release(ctx, key, req.Token); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("late release: %v, want ErrNotHeld", err)
	}
	if _, err := old.Acquire(ctx, req); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("late repeat of the grant: %v, want ErrNotAcquired", err)
	}
	info, err := old.Inspect(ctx, key)
	if err != nil || !info.Held || info.Fence != g2.Fence {
		t.Fatalf("after the late calls: %+v, %v; want held at fence %d", info, err, g2.Fence)
	}
	if err := cur.Release(ctx, key, next.Token); err != nil {
		t.Fatal(err)
	}
}

// drift is the client's margin on a lease of a second.
const drift = 12 * time.Millisecond

// TestCutLink: a holder whose link is cut past its lease learns that its
// lock is lost; another client takes the key meanwhile, and the old
// holder's release once the link is back changes nothing.
func TestCutLink(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	p := faultproxy.Start(t, st.servers[0].Addr())
	a := distlock.New(st.openAt(t, []string{p.Addr()}, natslock.WithRequestTimeout(500*time.Millisecond)))
	b := distlock.New(st.open(t))
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	key := uniqueKey(t)
	l, err := a.TryLock(ctx, key, distlock.WithLease(time.Second), distlock.WithWatchdog(true))
	if err != nil {
		t.Fatal(err)
	}
	p.Cut()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder behind a cut link was not told of its loss")
	}
	l2, err := b.Lock(ctx, key, distlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("no takeover while the holder's link is cut: %v", err)
	}
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after the takeover, not above %d", l2.Fence(), l.Fence())
	}
	p.Restore()
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("release of the lost lock: %v, want ErrLockLost", err)
	}
	err = retry(func() error {
		switch err := a.Backend().Release(ctx, key, l.Token()); {
		case errors.Is(err, driver.ErrNotHeld):
			return nil
		case err == nil:
			return errors.New("released the new holder's key")
		default:
			return err // the link is not back yet
		}
	})
	if err != nil {
		t.Fatalf("release by the old token once the link is back: %v, want ErrNotHeld", err)
	}
	if l2.Err() != nil {
		t.Fatalf("the new holder was disturbed: %v", l2.Err())
	}
	_ = l2.Release(ctx)
}

// TestClusterLeaderLost: on a bucket of three replicas, killing the
// stream's leader loses no hold; the holder renews and releases through
// the new leader, and the next grant's fence is higher.
func TestClusterLeaderLost(t *testing.T) {
	t.Parallel()
	servers := testserver.NATSCluster(t, 3)
	st := store{servers: servers, bucket: "locks"}
	st.create(t, natslock.BucketOptions{Replicas: 3})
	ctx := testContext(t, time.Minute)
	a, b := distlock.New(st.open(t)), distlock.New(st.open(t))
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	key := uniqueKey(t)
	l, err := a.TryLock(ctx, key, distlock.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := st.js(t).Stream(ctx, "KV_"+st.bucket)
	if err != nil {
		t.Fatal(err)
	}
	leader := s.CachedInfo().Cluster.Leader
	var killed *testserver.Server
	for _, srv := range servers {
		if srv.Name == "nats-"+leader {
			killed = srv
		}
	}
	if killed == nil {
		t.Fatalf("no server named %q among the cluster's", leader)
	}
	killed.Kill()
	var l2 *distlock.Lock
	err = retry(func() (err error) {
		l2, err = b.TryLock(ctx, key)
		if errors.Is(err, distlock.ErrNotAcquired) {
			return nil // the hold survived, as it should
		}
		if err == nil {
			return errors.New("a hold was lost with the stream's leader")
		}
		return err
	})
	if err != nil {
		t.Fatalf("lock of the held key after the leader was killed: %v", err)
	}
	if err := retry(func() error { return l.Renew(ctx) }); err != nil {
		t.Fatalf("renewal through the new leader: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := retry(func() (err error) { l2, err = b.TryLock(ctx, key); return err }); err != nil {
		t.Fatal(err)
	}
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after the leader changed, not above %d", l2.Fence(), l.Fence())
	}
	_ = l2.Release(ctx)
}

// TestOverForeignMarkers: a grant succeeds over the delete marker and the
// purge marker the plain Key-Value API leaves, as over no message.
func TestOverForeignMarkers(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	b, kv := st.open(t), st.kv(t)
	for name, remove := range map[string]func(string) error{
		"delete": func(k string) error { return kv.Delete(ctx, k) },
		"purge":  func(k string) error { return kv.Purge(ctx, k) },
	} {
		key := uniqueKey(t) + "/" + name
		if _, err := kv.Put(ctx, natslock.EscapeKey(key), []byte(`{"t":"x","ttl":60000}`)); err != nil {
			t.Fatal(err)
		}
		if err := remove(natslock.EscapeKey(key)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: token(), TTL: time.Minute}); err != nil {
			t.Fatalf("grant over a %s marker: %v", name, err)
		}
	}
}

// TestLostReplies: a grant repeated by its token is granted again with
// the same fence and renews the hold; a repeated release succeeds once its
// first did; neither touches another token's hold.
func TestLostReplies(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	a, b := st.open(t), st.open(t)
	key := uniqueKey(t)
	req := driver.AcquireRequest{Key: key, Token: token(), TTL: 2 * time.Second}
	g, err := a.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	req.TTL = time.Minute
	for _, be := range []*natslock.Backend{a, b} { // the repeat's backend may not know the revision
		g2, err := be.Acquire(ctx, req)
		if err != nil || g2.Fence != g.Fence {
			t.Fatalf("repeated grant: %+v, %v; want fence %d", g2, err, g.Fence)
		}
	}
	if info, err := b.Inspect(ctx, key); err != nil || info.TTL < 50*time.Second {
		t.Fatalf("after the repeat: %+v, %v; want the repeat's lease of 1m", info, err)
	}
	if err := a.Release(ctx, key, req.Token); err != nil {
		t.Fatal(err)
	}
	for _, be := range []*natslock.Backend{a, b} {
		if err := be.Release(ctx, key, req.Token); err != nil {
			t.Fatalf("repeated release: %v", err)
		}
	}
	other := driver.AcquireRequest{Key: key, Token: token(), TTL: time.Minute}
	g3, err := b.Acquire(ctx, other)
	if err != nil || g3.Fence <= g.Fence {
		t.Fatalf("grant after the release: %+v, %v; want a fence above %d", g3, err, g.Fence)
	}
	if err := a.Release(ctx, key, req.Token); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("release by the old token of another's hold: %v, want ErrNotHeld", err)
	}
	if err := a.Renew(ctx, key, req.Token, time.Minute); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("renewal by the old token of another's hold: %v, want ErrNotHeld", err)
	}
	if _, err := a.Acquire(ctx, req); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("repeat by the old token of another's hold: %v, want ErrNotAcquired", err)
	}
	if info, err := a.Inspect(ctx, key); err != nil || info.Fence != g3.Fence {
		t.Fatalf("the other's hold: %+v, %v; want fence %d", info, err, g3.Fence)
	}
}

// TestLongKeys: a key of 512 bytes that escapes to three times as many is
// taken, listed and released.
func TestLongKeys(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	c := distlock.New(st.open(t))
	t.Cleanup(func() { _ = c.Close() })
	key := "long/" + strings.Repeat("é.", (distlock.MaxKeyLen-5)/3)
	l, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := c.List(ctx, "long/")
	if err != nil || len(infos) != 1 || infos[0].Key != key {
		t.Fatalf("List = %+v, %v; want the long key", infos, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBucketChecks: Open refuses a missing bucket and one without per-key
// time to live with driver.ErrNoSchema; CreateBucket leaves a fit bucket
// as it is.
func TestBucketChecks(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	js := st.js(t)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "plain"}); err != nil {
		t.Fatal(err)
	}
	for _, bucket := range []string{"nosuch", "plain"} {
		_, err := natslock.Open(ctx, "nats://"+st.servers[0].Addr()+"?bucket="+bucket)
		if !errors.Is(err, driver.ErrNoSchema) || !strings.Contains(err.Error(), bucket) {
			t.Errorf("Open of bucket %q: %v, want ErrNoSchema naming it", bucket, err)
		}
	}
	if err := natslock.CreateBucket(ctx, js, st.bucket, natslock.BucketOptions{}); err != nil {
		t.Fatalf("CreateBucket of an existing bucket: %v", err)
	}
	if err := natslock.CreateBucket(ctx, js, "plain", natslock.BucketOptions{}); !errors.Is(err, driver.ErrNoSchema) {
		t.Fatalf("CreateBucket over a bucket without per-key TTL: %v, want ErrNoSchema", err)
	}
}
