package redlock_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// ListPage lists the keys a majority holds, in pages, when no node holds
// all of them, and neither lists nor stops at a key only a minority holds;
// with fewer than a majority of nodes answering it fails.
func TestListPageMajority(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	servers := nodes(t, 5)
	addrs := addrsOf(servers)
	holder := distlock.New(open(t, addrs, ""))
	defer holder.Close()
	lister := distlock.New(open(t, addrs, ""))
	defer lister.Close()
	prefix := "listpage/" + t.Name() + "/"
	// Each key on three nodes of five, each node without one of them, and
	// between a and b a lock of two nodes.
	without := map[string][]string{"a": addrs[0:2], "b": addrs[2:4], "c": {addrs[4], addrs[0]}}
	var locks []*distlock.Lock
	for _, k := range []string{"c", "a", "b"} {
		l, err := holder.TryLock(ctx, prefix+k)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
		for _, a := range without[k] {
			if _, err := testserver.RedisCommand(ctx, a, "DEL", lockName(prefix+k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, a := range addrs[3:] {
		if _, err := testserver.RedisCommand(ctx, a, "SET", lockName(prefix+"ab"), "minority", "PX", "60000"); err != nil {
			t.Fatal(err)
		}
	}
	var pages [][]string
	after := ""
	for range 4 {
		infos, err := lister.ListPage(ctx, prefix, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		var page []string
		for _, in := range infos {
			page = append(page, strings.TrimPrefix(in.Key, prefix))
		}
		pages = append(pages, page)
		if len(infos) < 2 {
			break
		}
		after = infos[len(infos)-1].Key
	}
	if want := [][]string{{"a", "b"}, {"c"}}; !slices.EqualFunc(pages, want, slices.Equal) {
		t.Fatalf("pages of 2: %q, want %q", pages, want)
	}

	for _, l := range locks {
		_ = l.Release(ctx) // not held on every node, as the key's deletions left it
	}
	for _, s := range servers[:3] {
		s.Stop()
	}
	// A node that is down holds up a SCAN until its context ends.
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := lister.ListPage(sctx, prefix, "", 2); err == nil || !strings.Contains(err.Error(), "2 of 5 nodes answered") {
		t.Fatalf("ListPage with 2 nodes of 5 up: %v, want an error that says 2 of 5 nodes answered", err)
	}
}
