package redislock

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/distlock/distlock/driver"
)

// keys are the Redis names of one lock. They share the hash tag {escaped
// key}, so they live in one Cluster slot and one script can use them all.
type keys struct {
	lock  string // the token, with the lease as its time to live
	fence string // the fencing counter, living a minute beyond the lease
	meta  string // the holder's metadata as JSON, with the lease as its time to live
	// The waiters' queue (queue.lua): members by arrival, the same members by
	// expiry, and the metadata of those that have some.
	queue, expiry, waiterMeta string
	watchers                  string // the watchers a release wakes (watchers.lua)
}

// keysFor maps a lock key to its Redis names: prefix + "{" + escaped key + "}",
// plus ":fence", ":meta", ":q", ":qt", ":qm" and ":watchers" for the
// companions.
func (b *Backend) keysFor(key string) keys {
	base := b.prefix + "{" + escapeKey(key) + "}"
	n := len(base)
	// One allocation for all the names: "B:fence" + "B:meta" + "B:qt" + "B:qm" + "B:watchers".
	all := base + ":fence" + base + ":meta" + base + ":qt" + base + ":qm" + base + ":watchers"
	meta := n + len(":fence")
	qt := meta + n + len(":meta")
	qm := qt + n + len(":qt")
	watchers := qm + n + len(":qm")
	return keys{
		lock: all[:n], fence: all[:meta], meta: all[meta:qt],
		queue: all[qt : qm-1], expiry: all[qt:qm], waiterMeta: all[qm:watchers], watchers: all[watchers:],
	}
}

// lockNames returns keysFor's lock, fence and meta, built with fewer
// bytes, for the scripts that use no other names (acquire, renew,
// inspect): the hot path of Redlock, which names a key on every node.
func (b *Backend) lockNames(key string) (lock, fence, meta string) {
	base := b.prefix + "{" + escapeKey(key) + "}"
	all := base + ":fence" + base + ":meta"
	n, m := len(base), len(base)+len(":fence")
	return all[:n], all[:m], all[m:]
}

// requestName is the name of key's last request to release (request.lua).
func (b *Backend) requestName(key string) string {
	return b.prefix + "{" + escapeKey(key) + "}:request"
}

// all returns the names in the order of queue.lua's KEYS.
func (k keys) all() []string {
	return []string{k.lock, k.fence, k.meta, k.queue, k.expiry, k.waiterMeta, k.watchers}
}

// escapeKey makes key safe inside a hash tag: "}" would end the tag early
// (and an empty tag would hash the whole name), so "\" becomes "\\" and "}"
// becomes "\]". The mapping is reversible, see unescapeKey.
func escapeKey(key string) string {
	if !strings.ContainsAny(key, `\}`) {
		return key
	}
	return strings.NewReplacer(`\`, `\\`, `}`, `\]`).Replace(key)
}

// unescapeKey reverses escapeKey.
func unescapeKey(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
			if s[i] == ']' {
				b.WriteByte('}')
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// keyFromLockName returns the lock key of a lock name found by SCAN, or false
// if the name is not a lock name under the prefix.
func (b *Backend) keyFromLockName(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, b.prefix+"{")
	if !ok || !strings.HasSuffix(rest, "}") || strings.Contains(rest[:len(rest)-1], "}") {
		return "", false
	}
	return unescapeKey(rest[:len(rest)-1]), true
}

// globEscape escapes the characters SCAN MATCH treats as patterns.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}

// validatePrefix checks a key prefix: UTF-8 without control characters or
// braces (the backend places its own hash tag after the prefix), at most
// driver.MaxKeyLen bytes.
func validatePrefix(p string) error {
	if len(p) > driver.MaxKeyLen || !utf8.ValidString(p) || strings.ContainsAny(p, "{}") || strings.ContainsFunc(p, unicode.IsControl) {
		return fmt.Errorf("redislock: key prefix %q: %w: want at most %d bytes of UTF-8 without braces or control characters",
			p, driver.ErrInvalidOption, driver.MaxKeyLen)
	}
	return nil
}
