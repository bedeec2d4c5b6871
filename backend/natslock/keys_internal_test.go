package natslock

import (
	"strings"
	"testing"
)

// TestEscapeKey: every key escapes to a valid Key-Value key without '.',
// back to itself, and a prefix of a key to a prefix of its escaped form;
// a KV key natslock cannot have written is refused.
func TestEscapeKey(t *testing.T) {
	keys := []string{"a", "orders/42", "a.b", "é", "x=2E", " sp ace", "\U0001f600/z", "==", "-_/"}
	for _, k := range keys {
		e := EscapeKey(k)
		if strings.ContainsAny(e, ". *>") {
			t.Errorf("EscapeKey(%q) = %q: not one subject token", k, e)
		}
		if back, err := unescapeKey(e); err != nil || back != k {
			t.Errorf("unescapeKey(EscapeKey(%q)) = %q, %v", k, back, err)
		}
		for i := range len(k) {
			if !strings.HasPrefix(e, EscapeKey(k[:i])) {
				t.Errorf("EscapeKey(%q) = %q does not start with the escaped prefix %q", k, e, EscapeKey(k[:i]))
			}
		}
	}
	for _, bad := range []string{"a.b", "=2", "=2e", "=41", "a=", "a b"} {
		if k, err := unescapeKey(bad); err == nil {
			t.Errorf("unescapeKey(%q) = %q, want an error", bad, k)
		}
	}
}
