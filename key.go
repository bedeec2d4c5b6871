package distlock

import "github.com/distlock/distlock/driver"

// MaxKeyLen is the longest key, in bytes, that any backend accepts.
const MaxKeyLen = driver.MaxKeyLen

// ValidateKey reports whether key is a valid lock key: non-empty UTF-8 of at
// most MaxKeyLen bytes without control characters. The error matches
// ErrInvalidKey.
func ValidateKey(key string) error { return driver.ValidateKey(key) }

// Info describes a key's state in the store, as Inspect and List report it.
type Info = driver.Info

// Meta is what a lock records about its holder: owner, business id, labels.
type Meta = driver.Meta
