package zklock

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

// Store layout: a lock key K owns the parent ROOT/b64(K), where b64 is
// unpadded base64url, whose alphabet has neither '/' nor '.': no key can
// name a path outside its parent or the root. Each acquisition is an
// ephemeral sequential child "lock-TOKEN-" plus the sequence number
// ZooKeeper appends; the lowest sequence holds the lock.

// parent returns the node under which key's queue lives.
func (b *Backend) parent(key string) string {
	return b.root + "/" + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// keyOf reverses parent for one child name of the root.
func keyOf(name string) (string, bool) {
	k, err := base64.RawURLEncoding.DecodeString(name)
	return string(k), err == nil
}

const nodePrefix = "lock-"

// nodeName is the name of token's node before the sequence suffix.
func nodeName(token string) string { return nodePrefix + token + "-" }

// seqLen is the length of the suffix ZooKeeper appends to sequential nodes.
const seqLen = 10

// sortQueue orders a parent's children by sequence number, dropping names
// that are not queue nodes.
func sortQueue(children []string) []string {
	q := slices.DeleteFunc(slices.Clone(children), func(c string) bool {
		return !strings.HasPrefix(c, nodePrefix) || len(c) < len(nodePrefix)+seqLen
	})
	slices.SortFunc(q, func(a, b string) int { return strings.Compare(a[len(a)-seqLen:], b[len(b)-seqLen:]) })
	return q
}

// findToken returns the child of token, or "".
func findToken(children []string, token string) string {
	for _, c := range children {
		if strings.HasPrefix(c, nodeName(token)) {
			return c
		}
	}
	return ""
}

// value is what a node stores. TTL is the lease plus lock-delay, which the
// waiter behind the holder enforces. Shared marks a read-write lock
// writer's node that a downgrade made a reader's (see rwlock.go); Permits
// is the count of a semaphore's hold of several permits, which its node's
// name tells too (see semaphore_weighted.go), absent for one.
type value struct {
	Token   string      `json:"token"`
	TTLMs   int64       `json:"ttl_ms"`
	Meta    driver.Meta `json:"meta"`
	Shared  bool        `json:"shared,omitempty"`
	Permits int         `json:"permits,omitempty"`
}

func encodeValue(token string, ttl time.Duration, meta driver.Meta) []byte {
	return value{Token: token, TTLMs: ttl.Milliseconds(), Meta: meta}.encode()
}

func (v value) encode() []byte {
	raw, _ := json.Marshal(v) // never fails
	return raw
}

func decodeValue(path string, raw []byte) (value, error) {
	var v value
	if err := json.Unmarshal(raw, &v); err != nil {
		return value{}, fmt.Errorf("zklock: %s: decode value: %w", path, err)
	}
	return v, nil
}

func (v value) ttl() time.Duration { return time.Duration(v.TTLMs) * time.Millisecond }
