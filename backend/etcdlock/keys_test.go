package etcdlock_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/internal/testserver"
)

var layouts = []struct {
	layout etcdlock.KeyLayout
	sep    string
}{{etcdlock.KeyLayoutEscaped, "/"}, {etcdlock.KeyLayoutOrdered, "!"}}

func TestEscapeRoundTrip(t *testing.T) {
	for _, l := range layouts {
		for _, k := range []string{"a", "a/b", "..", ".", "/", "!", "%2F", "a%b", "ключ/…", "x:y~z_-", "@^~\x00\xff"} {
			e := etcdlock.Escape(l.layout, k)
			if strings.ContainsAny(e, "/."+l.sep) {
				t.Errorf("%s: escape(%q) = %q holds a path character", l.layout, k, e)
			}
			if back, err := etcdlock.Unescape(l.layout, e); err != nil || back != k {
				t.Errorf("%s: unescape(escape(%q)) = %q, %v", l.layout, k, back, err)
			}
		}
		for _, bad := range []string{"%", "%4", "%zz", "a%"} {
			if _, err := etcdlock.Unescape(l.layout, bad); err == nil {
				t.Errorf("%s: unescape(%q) succeeded", l.layout, bad)
			}
		}
	}
	// The ordered layout reads only what it writes: one form per key.
	for _, bad := range []string{"%41", "@2F", "%2f", "~2F", "^7E"} {
		if k, err := etcdlock.Unescape(etcdlock.KeyLayoutOrdered, bad); err == nil {
			t.Errorf("ordered: unescape(%q) = %q, want an error", bad, k)
		}
	}
}

// TestOrderedLayoutKeepsOrder checks on random keys, and on keys that are
// prefixes of each other, that the ordered layout's store names sort as
// the keys do, directory separator included, where the escaped layout's do
// not.
func TestOrderedLayoutKeepsOrder(t *testing.T) {
	alphabet := []byte("aZ09 !-./:@[^_`{~\x7f\u00e9")
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "a-b", "a/b", "a b", "a.b", "a~", "a\xff"}
	for range 2000 {
		k := make([]byte, 1+rng.IntN(4))
		for i := range k {
			k[i] = alphabet[rng.IntN(len(alphabet))]
		}
		keys = append(keys, string(k))
	}
	name := func(l etcdlock.KeyLayout, k string) string { return etcdlock.Dir("ns", l, k) + "0000000000000001" }
	for _, l := range layouts {
		byName := slices.Clone(keys)
		slices.SortStableFunc(byName, func(a, b string) int { return strings.Compare(name(l.layout, a), name(l.layout, b)) })
		sorted := slices.Sorted(slices.Values(keys))
		same := slices.Equal(byName, sorted)
		if want := l.layout == etcdlock.KeyLayoutOrdered; same != want {
			t.Errorf("%s: store names sort as the keys do: %v, want %v", l.layout, same, want)
		}
	}
}

// TestKeysStayInNamespace locks keys made of path syntax in each layout,
// with a waiter behind each holder, and checks that every store key
// written is PREFIX/<one segment><sep><lease> or the segment's tail key, with the segment naming the whole lock key,
// and that keys which are path prefixes of each other do not exclude each
// other.
func TestKeysStayInNamespace(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli := admin(t, eps)
	for _, l := range layouts {
		t.Run(string(l.layout), func(t *testing.T) { keysStayInNamespace(t, eps, cli, l.layout, l.sep) })
	}
}

func keysStayInNamespace(t *testing.T, eps []string, cli *clientv3.Client, layout etcdlock.KeyLayout, sep string) {
	prefix := uniquePrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := distlock.New(dial(t, eps, prefix, etcdlock.WithKeyLayout(layout)))
	defer c.Close()
	keys := []string{"a", "a/b", "a/../b", "../../etc", "..", ".", "/", "//", "a/./b/", "%2F", "a%2Fb", "ключ/…", "a!b", "!"}
	for _, k := range keys {
		l, err := c.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("TryLock %q: %v", k, err)
		}
		defer l.Release(ctx)
	}
	// A waiter on each key, so that the queue's tail key is written too.
	waiters := distlock.New(dial(t, eps, prefix, etcdlock.WithKeyLayout(layout)))
	defer waiters.Close()
	wctx, stopWaiting := context.WithCancel(ctx)
	var waiting sync.WaitGroup
	defer waiting.Wait()
	defer stopWaiting()
	for _, k := range keys {
		waiting.Go(func() { _, _ = waiters.Lock(wctx, k, distlock.WithWait(time.Minute)) })
		queueLength(t, cli, prefix, k, 2)
	}
	all, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var got, tails []string
	for _, kv := range all.Kvs {
		if string(kv.Key) == prefix+".layout" {
			continue
		}
		rest, ok := strings.CutPrefix(string(kv.Key), prefix+"/")
		if seg, isTail := strings.CutSuffix(rest, ".tail"); ok && isTail && !strings.Contains(seg, sep) {
			k, err := etcdlock.Unescape(layout, seg)
			if err != nil {
				t.Fatal(err)
			}
			tails = append(tails, k)
			continue
		}
		parts := strings.Split(rest, sep)
		if !ok || len(parts) != 2 || parts[0] == "" || len(parts[1]) != 16 {
			t.Fatalf("store key %q is not %s/<key>%s<lease> or %s/<key>.tail", kv.Key, prefix, sep, prefix)
		}
		k, err := etcdlock.Unescape(layout, parts[0])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(tails)
	want := slices.Sorted(slices.Values(keys))
	if len(got) != 2*len(keys) || !slices.Equal(slices.Compact(got), want) {
		t.Fatalf("store holds entries of %q, want two of each of %q", got, want)
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
