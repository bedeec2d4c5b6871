package driver

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, in bytes, that any backend accepts.
const MaxKeyLen = 512

// ValidateKey reports whether key is a valid lock key: non-empty UTF-8 of at
// most MaxKeyLen bytes without control characters. The error matches
// ErrInvalidKey and says what is wrong, not the key, which the caller names.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, the maximum is %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	for i, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: a control character at byte %d", ErrInvalidKey, i)
		}
	}
	return nil
}
