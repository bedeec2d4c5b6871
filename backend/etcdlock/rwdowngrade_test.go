package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// A writer's hold downgraded by another backend, by token, carries on on
// the backend that granted it: its renewals, one of them with another TTL
// (a move to another lease), keep it a reader's hold with its fence,
// readers join it, writers stay out, and its loss notice stays quiet.
func TestRWDowngradeOnAnotherBackend(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	prefix := uniquePrefix(t)
	a, b := dial(t, eps, prefix), dial(t, eps, prefix)
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name, writer, reader = "rw", "0123456789abcdef0123456789abcdef", "1123456789abcdef0123456789abcdef"
	g, err := a.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: writer, TTL: 5 * time.Second}, driver.Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DowngradeRW(ctx, name, writer); err != nil {
		t.Fatalf("DowngradeRW on another backend: %v", err)
	}
	for _, ttl := range []time.Duration{5 * time.Second, 8 * time.Second} {
		if err := a.RenewRW(ctx, name, writer, ttl); err != nil {
			t.Fatalf("renewal for %v on the granting backend after the downgrade: %v", ttl, err)
		}
	}
	if _, err := b.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: reader, TTL: 5 * time.Second}, driver.Shared); err != nil {
		t.Fatalf("a reader beside the downgraded hold: %v", err)
	}
	req := driver.AcquireRequest{Key: name, Token: "2123456789abcdef0123456789abcdef", TTL: 5 * time.Second}
	if _, err := b.AcquireRW(ctx, req, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer beside the downgraded hold: %v, want ErrNotAcquired", err)
	}
	mode, held, _, err := a.InspectRW(ctx, name)
	if err != nil || mode != driver.Shared || len(held) != 2 || held[0].Fence != g.Fence {
		t.Fatalf("InspectRW: %v, %+v, %v; want two readers, the first with fence %d", mode, held, err, g.Fence)
	}
	time.Sleep(300 * time.Millisecond) // past the loss watch's start: a chance to misreport
	if g.Lost.Err() != nil {
		t.Fatal("the downgraded hold was reported lost")
	}
	for _, token := range []string{writer, reader} {
		if err := a.ReleaseRW(ctx, name, token); err != nil {
			t.Fatal(err)
		}
	}
}
