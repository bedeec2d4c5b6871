package etcdlock

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// Store layout. A lock key K owns the directory PREFIX/esc(K)/; each
// acquisition, holder or waiter, is one key PREFIX/esc(K)/LEASE (the lease
// ID in hex) attached to that lease, with the token in its value; a holder
// renewed with another TTL moves to a lease of that TTL and keeps its name
// (see Backend.move). The key
// with the lowest create revision in the directory is the holder; the
// others queue behind it in create-revision order.
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
// esc keeps ASCII letters, digits, '-', '_', '~' and ':' and writes every
// other byte as %XX. The escaped key therefore holds no '/' or '.', so no
// lock key can name a path outside its own directory, reach another lock's
// directory, or leave the namespace; and since bytes are escaped one by one,
// esc(p) is a prefix of esc(k) whenever p is a prefix of k, which List needs.

// escape maps a lock key to one path segment.
func escape(key string) string {
	var b strings.Builder
	b.Grow(len(key))
	for i := 0; i < len(key); i++ {
		c := key[i]
		if keep(c) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func keep(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '~' || c == ':'
}

// unescape reverses escape.
func unescape(seg string) (string, error) {
	var b strings.Builder
	b.Grow(len(seg))
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(seg) {
			return "", fmt.Errorf("etcdlock: bad escape in %q", seg)
		}
		v, err := strconv.ParseUint(seg[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("etcdlock: bad escape in %q: %w", seg, err)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

// dir returns the directory of key's queue, ending in '/'.
func (b *Backend) dir(key string) string { return b.prefix + escape(key) + "/" }

// tailKey returns the key naming the newest entry of key's queue.
func (b *Backend) tailKey(key string) string { return b.prefix + escape(key) + ".tail" }

// releasedKey returns the key holding the create revision of the last entry
// of key's queue that was released as its holder.
func (b *Backend) releasedKey(key string) string { return b.prefix + escape(key) + ".released" }

// entryKey returns the queue entry of key on lease.
func (b *Backend) entryKey(key string, lease clientv3.LeaseID) string {
	return fmt.Sprintf("%s%016x", b.dir(key), int64(lease))
}

// splitEntry parses a queue entry's store key into the lock key and the
// entry's name.
func (b *Backend) splitEntry(storeKey string) (key, name string, err error) {
	rest, ok := strings.CutPrefix(storeKey, b.prefix)
	i := strings.LastIndexByte(rest, '/')
	if !ok || i < 0 {
		return "", "", fmt.Errorf("etcdlock: %q is not a lock entry under %q", storeKey, b.prefix)
	}
	key, err = unescape(rest[:i])
	return key, rest[i+1:], err
}

// value is what a queue entry stores.
type value struct {
	Token string      `json:"token"`
	Meta  driver.Meta `json:"meta"`
}

func encodeValue(token string, meta driver.Meta) string {
	v, _ := json.Marshal(value{Token: token, Meta: meta}) // plain strings and maps never fail
	return string(v)
}

func decodeValue(raw []byte) (value, error) {
	var v value
	if err := json.Unmarshal(raw, &v); err != nil {
		return value{}, fmt.Errorf("etcdlock: decode value: %w", err)
	}
	return v, nil
}
