package etcdlock

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// Store layout. A lock key K owns the directory PREFIX/esc(K)SEP, where
// esc and SEP are the namespace's key layout (below); each acquisition,
// holder or waiter, is one key PREFIX/esc(K)SEP LEASE (the lease ID in hex)
// attached to that lease, with the token in its value; a holder renewed
// with another TTL moves to a lease of that TTL and keeps its name (see
// Backend.move). The key with the lowest create revision in the directory
// is the holder; the others queue behind it in create-revision order.
//
// Two more keys per lock key make waiting cost the same whatever the length
// of the queue (etcd reads a whole directory for any range sorted by create
// revision): PREFIX/esc(K).tail names the newest entry, written in the
// transaction that creates each entry, so that a new waiter learns the entry
// just ahead of it with no range read; and PREFIX/esc(K).released holds the
// create revision of the last holder that released with waiters behind it,
// written in the release's own transaction, so that its successor learns it
// is first with one key read. Both are on leases of the queue's entries and
// the queue's last holder deletes them: neither outlives the queue by more
// than a lease. Neither is in the directory, and neither can be one, since
// an escaped key holds no '.'.
//
// Naming entries by lease rather than by token matters for a busy lock:
// etcd keeps every deleted key name in its index until a compaction, and a
// range read walks them all. Released leases are reused (see leasePool), so
// a directory sees a few hundred names per client at most, where one name per
// acquisition would grow its index by one with every Lock.
//
// A namespace has one of two key layouts, recorded in PREFIX.layout (see
// layout.go). Both escape each byte on its own, so esc(p) is a prefix of
// esc(k) whenever p is a prefix of k, which List needs, and neither escaped
// key holds '/', '.' or SEP, so no lock key can name a path outside its own
// directory, reach another lock's directory, or leave the namespace.
//
//   - escaped (SEP '/'), the layout of every earlier release: ASCII letters,
//     digits, '-', '_', '~' and ':' stay, every other byte is %XX. It does
//     not keep the keys' byte order ("a/b" sorts after "a-b", "a%2Fb"
//     before "a-b"), so a List page reads the whole namespace.
//   - ordered (SEP '!'): ASCII letters and digits stay, and every other
//     byte is an escape character and two hex digits, the character being
//     the one that sorts where the byte does: '%' for the bytes below '0',
//     '@' between '9' and 'A', '^' between 'Z' and 'a', '~' above 'z'.
//     Every escaped form starts above SEP, so esc(k) < esc(k2) exactly when
//     k < k2, and the store keys of the lock keys that sort after a key form
//     one range of the store, which is what a List page reads.

// keyLayout is how a namespace names its lock keys in the store.
type keyLayout struct {
	name     string // as recorded in the namespace
	sep      byte   // ends an escaped key, before its entries' names
	escape   func(string) string
	unescape func(string) (string, error)
}

var (
	escapedLayout = &keyLayout{name: "escaped", sep: '/', escape: escape, unescape: unescape}
	orderedLayout = &keyLayout{name: "ordered", sep: '!', escape: escapeOrdered, unescape: unescapeOrdered}
)

// escape maps a lock key to one path segment of the escaped layout.
func escape(key string) string {
	return escapeBy(key, keep, func(byte) byte { return '%' })
}

// escapeBy keeps the bytes of key that kept reports, and writes every other
// byte c as the character escapeChar(c) and two hex digits.
func escapeBy(key string, kept func(c byte) bool, escapeChar func(c byte) byte) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key))
	for i := 0; i < len(key); i++ {
		c := key[i]
		if kept(c) {
			b.WriteByte(c)
			continue
		}
		b.Write([]byte{escapeChar(c), hex[c>>4], hex[c&0xF]})
	}
	return b.String()
}

func keep(c byte) bool {
	return isAlnum(c) || c == '-' || c == '_' || c == '~' || c == ':'
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// unescape reverses escape.
func unescape(seg string) (string, error) {
	return unescapeBy(seg, func(c byte) bool { return c == '%' }, func(byte, string) bool { return true })
}

// unescapeBy reverses an escaping that writes a byte as an escape character
// (one that escapes reports) and two hex digits; fits reports whether an
// escape character and the digits after it write a byte in that form.
func unescapeBy(seg string, escapes func(c byte) bool, fits func(c byte, digits string) bool) (string, error) {
	var b strings.Builder
	b.Grow(len(seg))
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if !escapes(c) {
			b.WriteByte(c)
			continue
		}
		v, err := hexByte(seg, i)
		if err != nil {
			return "", err
		}
		if !fits(c, seg[i+1:i+3]) {
			return "", fmt.Errorf("etcdlock: bad escape %q in %q", seg[i:i+3], seg)
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}

// hexByte reads the byte that the two hex digits after seg[i] write.
func hexByte(seg string, i int) (byte, error) {
	if i+2 >= len(seg) {
		return 0, fmt.Errorf("etcdlock: bad escape in %q", seg)
	}
	v, err := strconv.ParseUint(seg[i+1:i+3], 16, 8)
	if err != nil {
		return 0, fmt.Errorf("etcdlock: bad escape in %q: %w", seg, err)
	}
	return byte(v), nil
}

// orderedEscape returns the character that escapes c in the ordered
// layout: the one that sorts between the letters and digits around c.
func orderedEscape(c byte) byte {
	switch {
	case c < '0':
		return '%'
	case c < 'A':
		return '@'
	case c < 'a':
		return '^'
	default:
		return '~'
	}
}

// escapeOrdered maps a lock key to one segment of the ordered layout.
func escapeOrdered(key string) string { return escapeBy(key, isAlnum, orderedEscape) }

// unescapeOrdered reverses escapeOrdered; a segment that escapeOrdered
// does not write is an error.
func unescapeOrdered(seg string) (string, error) {
	return unescapeBy(seg, func(c byte) bool { return !isAlnum(c) }, func(c byte, digits string) bool {
		v, _ := strconv.ParseUint(digits, 16, 8)
		return !isAlnum(byte(v)) && orderedEscape(byte(v)) == c && digits == strings.ToUpper(digits)
	})
}

// keys returns the namespace's layout; ready learns it before any call
// names a key.
func (b *Backend) keys() *keyLayout { return b.layout.Load() }

// esc maps a lock key to its segment in the namespace's layout.
func (b *Backend) esc(key string) string { return b.keys().escape(key) }

// dir returns the directory of key's queue, ending in the layout's
// separator.
func (b *Backend) dir(key string) string {
	l := b.keys()
	return b.prefix + l.escape(key) + string(l.sep)
}

// tailKey returns the key naming the newest entry of key's queue.
func (b *Backend) tailKey(key string) string { return b.prefix + b.esc(key) + ".tail" }

// releasedKey returns the key holding the create revision of the last entry
// of key's queue that was released as its holder.
func (b *Backend) releasedKey(key string) string { return b.prefix + b.esc(key) + ".released" }

// entryKey returns the queue entry of key on lease.
func (b *Backend) entryKey(key string, lease clientv3.LeaseID) string {
	return fmt.Sprintf("%s%016x", b.dir(key), int64(lease))
}

// entryDir returns the directory of an entry that entryKey named.
func entryDir(entry string) string { return entry[:len(entry)-16] }

// splitEntry parses a queue entry's store key into the lock key and the
// entry's name.
func (b *Backend) splitEntry(storeKey string) (key, name string, err error) {
	l := b.keys()
	rest, ok := strings.CutPrefix(storeKey, b.prefix)
	i := strings.LastIndexByte(rest, l.sep)
	if !ok || i < 0 {
		return "", "", fmt.Errorf("etcdlock: %q is not a lock entry under %q", storeKey, b.prefix)
	}
	key, err = l.unescape(rest[:i])
	return key, rest[i+1:], err
}

// value is what a queue entry stores. Shared marks a read-write lock
// writer's entry that a downgrade made a reader's (see rwlock.go); Permits
// is the count of a semaphore's hold of several permits (see
// semaphore.go), absent for one.
type value struct {
	Token   string      `json:"token"`
	Meta    driver.Meta `json:"meta"`
	Shared  bool        `json:"shared,omitempty"`
	Permits int         `json:"permits,omitempty"`
}

func encodeValue(token string, meta driver.Meta) string {
	return value{Token: token, Meta: meta}.encode()
}

func (v value) encode() string {
	raw, _ := json.Marshal(v) // plain strings, maps and a bool never fail
	return string(raw)
}

func decodeValue(raw []byte) (value, error) {
	var v value
	if err := json.Unmarshal(raw, &v); err != nil {
		return value{}, fmt.Errorf("etcdlock: decode value: %w", err)
	}
	return v, nil
}
