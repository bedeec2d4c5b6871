package pglock

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/fnv"
)

// KeyIDs names a scheme that maps keys to advisory lock ids. A database
// records the scheme its clients use (see Backend.Migrate), since clients
// of two schemes lock different ids for one key and so do not exclude each
// other.
type KeyIDs string

const (
	// KeyIDsSHA256 maps keys with KeyID and NamespacedKeyID (SHA-256). A
	// new database gets it.
	KeyIDsSHA256 KeyIDs = "sha256"
	// KeyIDsFNV1a maps keys with LegacyKeyID and LegacyNamespacedKeyID
	// (FNV-1a), as versions before the SHA-256 ids did: a database those
	// versions used keeps it until every client is upgraded and an
	// operator moves it (see docs/sql.md). Anyone who chooses keys can
	// make two keys share an id under it.
	KeyIDsFNV1a KeyIDs = "fnv1a"
)

// valid reports an error unless k names a scheme.
func (k KeyIDs) valid() error {
	if k != KeyIDsSHA256 && k != KeyIDsFNV1a {
		return fmt.Errorf("unknown key-id scheme %q: want %q or %q", string(k), KeyIDsSHA256, KeyIDsFNV1a)
	}
	return nil
}

// KeyID returns the advisory lock id of key: the first 8 bytes of the
// SHA-256 of its bytes, big-endian, as a signed bigint. It never changes
// between versions, so other programs can lock the same id, e.g. SELECT
// pg_advisory_lock(id) in psql, on a database whose scheme is KeyIDsSHA256
// (Backend.KeyIDs). Finding a key whose id equals a given key's takes about
// 2^64 hashes, so a caller who chooses keys cannot reach the lock of a key
// it did not choose. Two keys that share an id, both chosen by the
// searcher, take about 2^32 (a birthday search, as for any 64-bit id): a
// caller can make two keys of its own share one lock, which excludes
// nobody else.
func KeyID(key string) int64 {
	sum := sha256.Sum256([]byte(key))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// NamespacedKeyID returns the advisory lock id of key under namespace ns:
// ns in the high 32 bits, the first 4 bytes of the SHA-256 of key,
// big-endian, in the low 32 bits. 32 bits do not resist a search: a key
// whose id equals a given one's is found in about 2^32 hashes, minutes of
// one CPU, so keys under a namespace must not come from untrusted input
// (see WithNamespace).
func NamespacedKeyID(ns int32, key string) int64 {
	sum := sha256.Sum256([]byte(key))
	return int64(ns)<<32 | int64(binary.BigEndian.Uint32(sum[:4]))
}

// LegacyKeyID returns the advisory lock id of key under KeyIDsFNV1a: the
// FNV-1a 64-bit hash of its bytes as a signed bigint, the id of versions
// before KeyID used SHA-256. FNV-1a is not collision resistant: a caller who
// chooses keys can build one that shares another key's id, and so block it
// and see whether it is held.
func LegacyKeyID(key string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key)) // a hash.Hash never fails to write
	return int64(h.Sum64())
}

// LegacyNamespacedKeyID returns the advisory lock id of key under namespace
// ns under KeyIDsFNV1a: ns in the high 32 bits, the 32-bit FNV-1a hash of
// key in the low 32 bits.
func LegacyNamespacedKeyID(ns int32, key string) int64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int64(ns)<<32 | int64(h.Sum32())
}
