package policy

import "strconv"

// Stripe returns the sub-lock of key that guards id when key is split into n
// stripes: key + "#" + the stripe number, chosen by a stable hash of id
// (64-bit FNV-1a), the same in every process and release. It panics if n < 1.
//
// Striping trades exclusion for throughput, and the exclusion it gives is
// weaker than the key's: holders of different stripes run at the same time,
// so a stripe protects only the state that belongs to the ids it covers (the
// counter of one account, the seats of one row), never state shared by the
// whole key. Ids that hash to the same stripe wait for each other although
// they need not. Every process must use the same n: with different n the
// same id maps to different sub-locks and nothing is excluded. To exclude
// the whole key, lock every key of Stripes in order.
func Stripe(key, id string, n int) string {
	if n < 1 {
		panic("policy: Stripe needs n >= 1")
	}
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= prime
	}
	return stripeKey(key, int(h%uint64(n)))
}

// Stripes returns the n sub-locks of key, in the order in which to lock all
// of them (one order everywhere, so that two such holders cannot deadlock).
func Stripes(key string, n int) []string {
	if n < 1 {
		panic("policy: Stripes needs n >= 1")
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = stripeKey(key, i)
	}
	return keys
}

func stripeKey(key string, i int) string { return key + "#" + strconv.Itoa(i) }
