// Package keyrange turns a key prefix into a range of keys, for stores that
// keep keys in byte order and can read a range of an index but not a prefix
// (SQL's LIKE and left() use no index of a parameter's prefix).
package keyrange

import (
	"strings"
	"unicode/utf8"

	"github.com/distlock/distlock/driver"
)

// spaceEnd sorts after every key: keys are UTF-8 of at most driver.MaxKeyLen
// bytes, and U+10FFFF is the greatest code point.
var spaceEnd = strings.Repeat(string(utf8.MaxRune), driver.MaxKeyLen/utf8.UTFMax+1)

// End returns the end of the range of keys that start with prefix: a key
// (valid UTF-8 of at most driver.MaxKeyLen bytes) starts with prefix if and
// only if prefix <= key < End(prefix), compared byte for byte. End(prefix)
// is valid UTF-8 whenever prefix is, so that a store that checks its text
// takes it.
func End(prefix string) string {
	if !utf8.ValidString(prefix) {
		// No key starts with the invalid bytes at prefix's end, unless they
		// begin a character that the key completes: end past those bytes.
		for i := len(prefix) - 1; i >= 0; i-- {
			if prefix[i] != 0xff {
				return prefix[:i] + string([]byte{prefix[i] + 1})
			}
		}
		return spaceEnd
	}
	// The next code point after the last one that has one: UTF-8 keeps the
	// order of code points, and no character's encoding begins another's.
	for p := prefix; p != ""; {
		r, size := utf8.DecodeLastRuneInString(p)
		p = p[:len(p)-size]
		switch {
		case r == utf8.MaxRune:
			continue
		case r+1 == 0xD800: // the surrogates are no characters
			return p + "\uE000"
		}
		return p + string(r+1)
	}
	return spaceEnd
}
