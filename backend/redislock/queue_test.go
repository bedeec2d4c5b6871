package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/childproc"
	"github.com/distlock/distlock/internal/testserver"
)

var cmdCalls = regexp.MustCompile(`(?m)^cmdstat_(evalsha|eval|publish):calls=(\d+)`)

// commandCalls returns how many EVALSHA+EVAL and PUBLISH calls the server
// at addr ran since its statistics were last reset.
func commandCalls(t *testing.T, addr string) (scripts, publishes int) {
	t.Helper()
	for _, m := range cmdCalls.FindAllStringSubmatch(rawCommand(t, []string{addr}, "INFO", "commandstats"), -1) {
		n, _ := strconv.Atoi(m[2])
		if m[1] == "publish" {
			publishes += n
		} else {
			scripts += n
		}
	}
	return scripts, publishes
}

// TestNoHerdAcrossClients has 16 clients, each its own backend with its own
// connections as separate processes would have, take turns on one key with
// one goroutine each (lock, release, 1 ms of work). Every release must wake
// one waiter, not every client: the server must run few scripts per grant
// (the step that queues a waiter, the release that grants it the key; a
// plain attempt first, only where a key was not contended lately) and at
// most one notice per grant. The broadcast notices of a release used
// to wake every client, which then ran about 10 scripts per grant.
func TestNoHerdAcrossClients(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters[:2] {
		t.Run(a.name, func(t *testing.T) {
			ctx := testContext(t)
			const clients, rounds = 16, 25
			cs := make([]*distlock.Client, clients)
			for i := range cs {
				cs[i] = newClient(t, a.new(t, s.Addr()))
			}
			key := "herd/" + t.Name()
			rawCommand(t, []string{s.Addr()}, "CONFIG", "RESETSTAT")
			errs := make(chan error, clients)
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						l, err := c.Lock(ctx, key, distlock.WithWait(20*time.Second), distlock.WithLease(30*time.Second))
						if err != nil {
							errs <- err
							return
						}
						if err := l.Release(ctx); err != nil {
							errs <- err
							return
						}
						time.Sleep(time.Millisecond)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			scripts, publishes := commandCalls(t, s.Addr())
			grants := clients * rounds
			perGrant := float64(scripts) / float64(grants)
			t.Logf("%d grants: %.2f scripts and %.2f notices per grant", grants, perGrant, float64(publishes)/float64(grants))
			if perGrant > 3 {
				t.Errorf("%.2f scripts per grant, want at most 3: releases wake more than the next waiter", perGrant)
			}
			if publishes > grants {
				t.Errorf("%d notices for %d grants, want at most one per grant", publishes, grants)
			}
		})
	}
}

// queued returns how many waiters' entries the queue of key holds.
func queued(t *testing.T, addrs []string, key string) int {
	t.Helper()
	n, err := strconv.Atoi(rawCommand(t, addrs, "ZCARD", lockName(key)+":q"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitQueued waits until key's queue holds n entries.
func waitQueued(t *testing.T, addrs []string, key string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d waiters queued", n), func() error {
		if got := queued(t, addrs, key); got != n {
			return fmt.Errorf("%d queued", got)
		}
		return nil
	})
}

func TestFIFOAcrossClients(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters[:2] {
		t.Run(a.name, func(t *testing.T) {
			fifoAcrossClients(t, func(t testing.TB) driver.Backend { return a.new(t, s.Addr()) }, fixed(s.Addr()))
		})
	}
}

// fifoAcrossClients has waiters of six clients queue, one after the other,
// for a key held by a seventh; once it is released they must get it in the
// order they came, each within the lease of the one before.
func fifoAcrossClients(t *testing.T, newBackend func(testing.TB) driver.Backend, addrs func() []string) {
	ctx := testContext(t)
	key := "fifo/" + t.Name()
	held, err := newClient(t, newBackend(t)).Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	order := make(chan int, n)
	failed := make(chan error, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		c := newClient(t, newBackend(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctx, key, distlock.WithWait(20*time.Second), distlock.WithLease(10*time.Second))
			if err == nil {
				order <- i
				time.Sleep(2 * time.Millisecond)
				err = l.Release(ctx)
			}
			if err != nil {
				failed <- err
			}
		}()
		waitQueued(t, addrs(), key, i+1)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		select {
		case got := <-order:
			if got != i {
				t.Fatalf("grant %d went to the waiter that came %d-th, want the %d-th", i, got, i)
			}
		case err := <-failed:
			t.Fatalf("a waiter failed: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("grant %d did not come within 10s", i)
		}
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Fatal(err)
	}
	if n := queued(t, addrs(), key); n != 0 {
		t.Fatalf("%d entries left in the queue", n)
	}
}

func TestDeadWaiterProcess(t *testing.T) {
	s := testserver.Redis(t)
	deadWaiterProcess(t, "redis://"+s.Addr(), fixed(s.Addr()))
}

// deadWaiterProcess has a waiter in a process of its own (lease 2s) queue
// first for a held key, and a waiter of this process queue behind it; then
// the first process dies or freezes, and the key is released.
//
// Killed, the process's connections close and nobody hears the release's
// notice: the release passes the key over it at once. Frozen, as a host
// that vanished without closing its connections, it is still heard: it is
// granted the key, which is free again once its lease runs out, as a holder
// that vanished leaves it.
func deadWaiterProcess(t *testing.T, url string, addrs func() []string) {
	const lease = 2 * time.Second
	for _, how := range []string{"killed", "frozen"} {
		t.Run(how, func(t *testing.T) {
			ctx := testContext(t)
			key := "dead-waiter/" + t.Name()
			c := newClient(t, openURL(t, url))
			held, err := c.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			p := childproc.Start(t, childEnv, childJob{Mode: "wait", URL: url, Key: key, Wait: time.Minute, Lease: lease}, time.Minute)
			waitQueued(t, addrs(), key, 1)
			got := make(chan error, 1)
			other := newClient(t, openURL(t, url))
			go func() {
				l, err := other.Lock(ctx, key, distlock.WithWait(20*time.Second))
				if err == nil {
					err = l.Release(ctx)
				}
				got <- err
			}()
			waitQueued(t, addrs(), key, 2)
			if how == "killed" {
				p.Kill()
			} else if err := p.Process().Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // the server sees the connections close
			released := time.Now()
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			bound := 100 * time.Millisecond
			if how == "frozen" {
				bound = lease
			}
			bound += 250 * time.Millisecond
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("the waiter behind the %s process got the key %v after the release", how, time.Since(released).Round(time.Millisecond))
			case <-time.After(bound):
				t.Fatalf("the waiter behind the %s process did not get the key within %v of the release", how, bound)
			}
		})
	}
}

// TestBackendCloseLeavesQueue closes a backend, not its client, while one of
// its waiters is queued: the wait must end with ErrClosed and leave no entry
// in the queue, and the key must go to the next client at once on release.
func TestBackendCloseLeavesQueue(t *testing.T) {
	s := testserver.Redis(t)
	onEachClient(t, s, func(t *testing.T, ctx context.Context, b driver.Backend) {
		key := "close-leaves/" + t.Name()
		held, err := newClient(t, openURL(t, "redis://"+s.Addr())).Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		waiter := distlock.New(b)
		defer waiter.Close()
		got := make(chan error, 1)
		go func() {
			_, err := waiter.Lock(ctx, key, distlock.WithWait(20*time.Second))
			got <- err
		}()
		waitQueued(t, []string{s.Addr()}, key, 1)
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if !errors.Is(err, distlock.ErrClosed) {
				t.Fatalf("wait ended by the backend's Close: %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the backend's Close did not end the wait")
		}
		if n := queued(t, []string{s.Addr()}, key); n != 0 {
			t.Fatalf("%d entries left in the queue after Close", n)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := newClient(t, openURL(t, "redis://"+s.Addr())).TryLock(ctx, key)
		if err != nil {
			t.Fatalf("the key after the release: %v", err)
		}
		_ = l.Release(ctx)
	})
}
