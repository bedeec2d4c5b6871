package zklock_test

import (
	"context"
	"encoding/base64"
	"slices"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// TestKeysStayUnderRoot locks keys made of path syntax and checks that each
// gets one parent directly under the root, named by the whole key, that
// nothing appears outside the root, and that keys which are path prefixes of
// each other do not exclude each other.
func TestKeysStayUnderRoot(t *testing.T) {
	// A server of its own: the test counts the top-level nodes.
	srv := testserver.ZooKeeper(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := distlock.New(dial(t, srv.Addr(), root))
	defer c.Close()
	top, _, err := conn.Children("/")
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "a/b", "a/../b", "../../etc", "..", ".", "/", "//", "/zookeeper", "a/./b/", "%2F", "a%2Fb", "ключ/…"}
	for _, k := range keys {
		l, err := c.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock %q: %v", k, err)
		}
		defer l.Release(ctx)
	}
	parents, _, err := conn.Children(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range parents {
		k, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil {
			t.Fatalf("parent %q under the root is not an encoded key", p)
		}
		got = append(got, string(k))
		if q := queue(t, conn, root, string(k)); len(q) != 1 {
			t.Errorf("key %q: queue %v, want its one holder", k, q)
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, want) {
		t.Fatalf("parents under the root hold keys %q, want %q", got, want)
	}
	after, _, err := conn.Children("/")
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(top) {
		t.Fatalf("top-level nodes went from %v to %v", top, after)
	}
	infos, err := c.List(ctx, "a/")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, i := range infos {
		listed = append(listed, i.Key)
	}
	if want := []string{"a/../b", "a/./b/", "a/b"}; !slices.Equal(listed, want) {
		t.Fatalf("List(a/) = %q, want %q", listed, want)
	}
}
