package dashboard

import (
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// shownKey is how the dashboard shows a key, owner or business id: as it
// is, unless two different strings could look the same. Then every rune
// that cannot be seen, or that Unicode normalisation would fold, is written
// \u{XXXX}: format characters (zero-width spaces and joiners, bidi
// controls), spaces other than U+0020, private-use and unassigned code
// points, and, in a string that is not in NFC, combining marks. So
// "café" typed as NFC and as NFD ("cafe\u{301}") show apart, as do "a" and
// "a\u{200B}". The service never normalises keys: they are bytes, and two
// strings that differ are two locks.
func shownKey(s string) string {
	nfc := norm.NFC.IsNormalString(s)
	if nfc && strings.IndexFunc(s, hidden) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if hidden(r) || (!nfc && unicode.In(r, unicode.Mn, unicode.Mc, unicode.Me)) {
			fmt.Fprintf(&b, `\u{%04X}`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// hidden reports whether r shows as nothing, or as a space that is not
// U+0020: anything but a letter, mark, number, punctuation or symbol.
func hidden(r rune) bool {
	return r != ' ' && (r == unicode.ReplacementChar || !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S))
}
