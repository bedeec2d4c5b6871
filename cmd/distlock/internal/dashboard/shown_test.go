package dashboard

import "testing"

// Keys that differ only by invisible characters or normalisation show
// apart; ordinary keys, in any script, show as they are.
func TestShownKey(t *testing.T) {
	for in, want := range map[string]string{
		"orders/42":           "orders/42",
		"jobs/nightly report": "jobs/nightly report",
		"café":                "café",
		"заказы/42":           "заказы/42",
		"注文/42":               "注文/42",
		"❤️/emoji":            "❤️/emoji",
		"cafe\u0301":          `cafe\u{0301}`,
		"a\u200bb":            `a\u{200B}b`,
		"a\u200db":            `a\u{200D}b`,
		"pay\u202eyap":        `pay\u{202E}yap`,
		"a\u00a0b":            `a\u{00A0}b`,
		"a\ufeffb":            `a\u{FEFF}b`,
		"a\ue000b":            `a\u{E000}b`,
		"a\xffb":              `a\u{FFFD}b`,
	} {
		if got := shownKey(in); got != want {
			t.Errorf("shownKey(%+q) = %+q, want %+q", in, got, want)
		}
	}
}
