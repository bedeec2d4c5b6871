package etcdlock

// Escape maps key to its segment in layout, for the tests.
func Escape(layout KeyLayout, key string) string { return mustLayout(layout).escape(key) }

// Unescape reverses Escape.
func Unescape(layout KeyLayout, seg string) (string, error) { return mustLayout(layout).unescape(seg) }

// Dir returns the directory of key's queue in the namespace prefix of
// layout.
func Dir(prefix string, layout KeyLayout, key string) string {
	l := mustLayout(layout)
	return prefix + "/" + l.escape(key) + string(l.sep)
}

func mustLayout(layout KeyLayout) *keyLayout {
	l, err := layout.layout()
	if err != nil {
		panic(err)
	}
	return l
}
