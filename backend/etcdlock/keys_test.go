package etcdlock_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/internal/testserver"
)

func TestEscapeRoundTrip(t *testing.T) {
	for _, k := range []string{"a", "a/b", "..", ".", "/", "%2F", "a%b", "ключ/…", "x:y~z_-"} {
		e := etcdlock.Escape(k)
		if strings.ContainsAny(e, "/.") {
			t.Errorf("escape(%q) = %q holds a path character", k, e)
		}
		if back, err := etcdlock.Unescape(e); err != nil || back != k {
			t.Errorf("unescape(escape(%q)) = %q, %v", k, back, err)
		}
	}
	for _, bad := range []string{"%", "%4", "%zz"} {
		if _, err := etcdlock.Unescape(bad); err == nil {
			t.Errorf("unescape(%q) succeeded", bad)
		}
	}
}

// TestKeysStayInNamespace locks keys made of path syntax and checks that
// every store key written is PREFIX/<one segment>/<lease>, with the segment
// naming the whole lock key, and that keys which are path prefixes of each
// other do not exclude each other.
func TestKeysStayInNamespace(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli := admin(t, eps)
	prefix := uniquePrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := distlock.New(dial(t, eps, prefix))
	defer c.Close()
	keys := []string{"a", "a/b", "a/../b", "../../etc", "..", ".", "/", "//", "a/./b/", "%2F", "a%2Fb", "ключ/…"}
	for _, k := range keys {
		l, err := c.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock %q: %v", k, err)
		}
		defer l.Release(ctx)
	}
	all, err := cli.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var got, tails []string
	for _, kv := range all.Kvs {
		rest, ok := strings.CutPrefix(string(kv.Key), prefix+"/")
		if seg, isTail := strings.CutSuffix(rest, ".tail"); ok && isTail && !strings.Contains(seg, "/") {
			k, err := etcdlock.Unescape(seg)
			if err != nil {
				t.Fatal(err)
			}
			tails = append(tails, k)
			continue
		}
		parts := strings.Split(rest, "/")
		if !ok || len(parts) != 2 || parts[0] == "" || len(parts[1]) != 16 {
			t.Fatalf("store key %q is not %s/<key>/<lease> or %s/<key>.tail", kv.Key, prefix, prefix)
		}
		k, err := etcdlock.Unescape(parts[0])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(tails)
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, want) {
		t.Fatalf("store holds keys %q, want %q", got, want)
	}
	if !slices.Equal(tails, want) {
		t.Fatalf("store holds the tails of %q, want those of %q", tails, want)
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
