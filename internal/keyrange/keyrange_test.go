package keyrange

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/distlock/distlock/driver"
)

// The keys that start with a prefix are those in [prefix, End(prefix)), for
// prefixes and keys made of the characters at the edges of UTF-8's lengths
// and of the surrogates, and End is UTF-8 where the prefix is.
func TestEnd(t *testing.T) {
	chars := []string{"", "a", "b", "\u007f", "\u0080", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uffff",
		"\U00010000", "\U0010fffe", "\U0010ffff"}
	rnd := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		var b strings.Builder
		for range rnd.IntN(n + 1) {
			b.WriteString(chars[rnd.IntN(len(chars))])
		}
		return b.String()
	}
	check := func(prefix, key string) {
		t.Helper()
		end := End(prefix)
		if in := prefix <= key && key < end; in != strings.HasPrefix(key, prefix) {
			t.Fatalf("prefix %q, end %q: key %q in the range: %v, starts with the prefix: %v", prefix, end, key, in, !in)
		}
		if utf8.ValidString(prefix) && !utf8.ValidString(end) {
			t.Fatalf("End(%q) = %q, not UTF-8", prefix, end)
		}
	}
	for range 200_000 {
		prefix := word(3)
		check(prefix, word(4))
		check(prefix, prefix+word(2)) // one that starts with it
	}
	longest := strings.Repeat(string(utf8.MaxRune), driver.MaxKeyLen/utf8.UTFMax)
	for _, prefix := range []string{"", string(utf8.MaxRune), longest} {
		check(prefix, longest)
		check(prefix, "a")
	}
	// Bytes that are no UTF-8 yet, such as the first byte of a character.
	for _, c := range []struct{ prefix, key string }{
		{"\xc3", "é"}, {"\xc3", "ê"[:1] + "x"}, {"\xc3", "ħ"}, {"a\xff", "b"}, {"\xff", longest}, {"\xff\xff", "é"},
	} {
		check(c.prefix, c.key)
	}
}
