package natslock

import (
	"fmt"
	"strings"
)

// A lock's key becomes one token of a NATS subject, and so a KV key: the
// bytes A-Z, a-z, 0-9, '-', '_' and '/' stand for themselves, and every
// other byte is '=' and two upper-case hex digits. The mapping is one to
// one, keeps no '.' (so a key is never split into tokens), and maps a
// prefix of a key to a prefix of its escaped form, which List relies on.

// EscapeKey returns the Key-Value key that natslock keeps key under.
func EscapeKey(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key))
	for i := range len(key) {
		c := key[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}

// unescapeKey returns the lock's key of a KV key EscapeKey made, or an
// error for one it cannot have made.
func unescapeKey(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case plain(c):
			b.WriteByte(c)
		case c == '=' && i+2 < len(s) && upperHex(s[i+1]) && upperHex(s[i+2]):
			hi, lo := unhex(s[i+1]), unhex(s[i+2])
			if d := hi<<4 | lo; !plain(d) {
				b.WriteByte(d)
				i += 2
				continue
			}
			fallthrough
		default:
			return "", fmt.Errorf("KV key %q: not one natslock writes", s)
		}
	}
	return b.String(), nil
}

// plain reports whether c stands for itself in a KV key.
func plain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '/'
}

func upperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}
