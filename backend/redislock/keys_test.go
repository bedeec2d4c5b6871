package redislock

import (
	"strings"
	"testing"
)

func TestEscapeKeyRoundTrip(t *testing.T) {
	b := &Backend{prefix: DefaultPrefix}
	for _, key := range []string{"plain", "}", "}}", `\`, `\]`, `a}b\c]d`, "{x}", "é}ü", `\\}`} {
		e := escapeKey(key)
		if strings.Contains(e, "}") {
			t.Errorf("escapeKey(%q) = %q contains a closing brace", key, e)
		}
		if got := unescapeKey(e); got != key {
			t.Errorf("unescapeKey(escapeKey(%q)) = %q", key, got)
		}
		k := b.keysFor(key)
		if got, ok := b.keyFromLockName(k.lock); !ok || got != key {
			t.Errorf("keyFromLockName(%q) = %q, %v; want %q", k.lock, got, ok, key)
		}
		base := DefaultPrefix + "{" + e + "}"
		if want := (keys{lock: base, fence: base + ":fence", meta: base + ":meta", queue: base + ":q", expiry: base + ":qt", waiterMeta: base + ":qm", watchers: base + ":watchers"}); k != want {
			t.Errorf("keysFor(%q) = %+v, want %+v", key, k, want)
		}
		if lock, fence, meta := b.lockNames(key); lock != k.lock || fence != k.fence || meta != k.meta {
			t.Errorf("lockNames(%q) = %q, %q, %q; want keysFor's %q, %q, %q", key, lock, fence, meta, k.lock, k.fence, k.meta)
		}
		for _, other := range k.all()[1:] {
			if _, ok := b.keyFromLockName(other); ok {
				t.Errorf("keyFromLockName(%q) took a companion name for a lock", other)
			}
			if hashTag(other) != hashTag(k.lock) || hashTag(k.lock) == "" {
				t.Errorf("%q and %q do not share a non-empty hash tag", k.lock, other)
			}
		}
	}
}

// hashTag is Redis Cluster's rule: the text between the first "{" and the
// next "}", if not empty.
func hashTag(name string) string {
	i := strings.IndexByte(name, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(name[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return name[i+1 : i+1+j]
}
