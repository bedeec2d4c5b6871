package dynamolock

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/distlock/distlock/driver"
)

// The attributes of a lock's item. Only KeyAttribute is in the key schema.
const (
	// KeyAttribute is the table's partition key (a string): the lock's key.
	KeyAttribute = "lock_key"
	// ExpiresAttribute is the number (Unix seconds) that DynamoDB's Time to
	// Live reads, where it is on: an item may be deleted after it. It is
	// garbage collection only; no lock decision reads it.
	ExpiresAttribute = "expires_at"

	// LeaseAttribute is the lease of the current version, in milliseconds:
	// a number that Time to Live on it would misread as Unix seconds.
	LeaseAttribute = "lease_ms"

	attrToken   = "token" // the holder's token; absent while the key is free
	attrVersion = "rvn"   // record version number: new with every grant and renewal
	attrLease   = LeaseAttribute
	attrFence   = "fence"    // the fence of the last grant
	attrMeta    = "meta"     // the holder's driver.Meta as JSON; absent if empty
	attrFreedBy = "freed_by" // the token of the last release, which a repeat of it recognises
)

// LockAttributes returns every attribute dynamolock writes in a lock's
// item with a meaning other than garbage collection (all but
// ExpiresAttribute), each with the type of its values: "string" or
// "number". A tool that checks a table's Time to Live needs them.
func LockAttributes() map[string]string {
	return map[string]string{KeyAttribute: "string", attrToken: "string", attrVersion: "string", attrLease: "number",
		attrFence: "number", attrMeta: "string", attrFreedBy: "string"}
}

// lock is what an item says.
type lock struct {
	key     string
	held    bool
	token   string
	freedBy string
	version string
	lease   time.Duration
	fence   uint64
	meta    driver.Meta
}

func decode(item map[string]types.AttributeValue) (lock, error) {
	var l lock
	l.key = str(item[KeyAttribute])
	l.version = str(item[attrVersion])
	l.token, l.freedBy = str(item[attrToken]), str(item[attrFreedBy])
	_, l.held = item[attrToken]
	if n, ok := item[attrFence].(*types.AttributeValueMemberN); ok {
		f, err := strconv.ParseUint(n.Value, 10, 64)
		if err != nil {
			return lock{}, fmt.Errorf("item: fence %q: %w", n.Value, err)
		}
		l.fence = f
	}
	if n, ok := item[attrLease].(*types.AttributeValueMemberN); ok {
		ms, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			return lock{}, fmt.Errorf("item: lease %q: %w", n.Value, err)
		}
		l.lease = time.Duration(ms) * time.Millisecond
	}
	if m := str(item[attrMeta]); m != "" {
		if err := json.Unmarshal([]byte(m), &l.meta); err != nil {
			return lock{}, fmt.Errorf("item: metadata: %w", err)
		}
	}
	return l, nil
}

func str(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// keyOf is the primary key of key's item.
func keyOf(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{KeyAttribute: s(key)}
}

// leaseMillis rounds ttl up to whole milliseconds, so that a waiter never
// waits less than the lease.
func leaseMillis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// encodeMeta returns m as JSON, or "" for an empty m.
func encodeMeta(m driver.Meta) (string, error) {
	if m.Owner == "" && m.BusinessID == "" && len(m.Labels) == 0 {
		return "", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// newVersion returns a fresh record version number: 128 random bits.
func newVersion() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}
