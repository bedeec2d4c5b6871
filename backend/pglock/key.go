package pglock

import "hash/fnv"

// KeyID returns the advisory lock id of key: the FNV-1a 64-bit hash of its
// bytes as a signed bigint. It never changes between versions, so other
// programs can lock the same id, e.g. SELECT pg_advisory_lock(id) in psql.
func KeyID(key string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key)) // a hash.Hash never fails to write
	return int64(h.Sum64())
}

// NamespacedKeyID returns the advisory lock id of key under namespace ns:
// ns in the high 32 bits, the 32-bit FNV-1a hash of key in the low 32 bits.
func NamespacedKeyID(ns int32, key string) int64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int64(ns)<<32 | int64(h.Sum32())
}
