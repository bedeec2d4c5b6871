//go:build !chaos

package distlock

// failpoint is a point where the chaos suite (built with -tags chaos) can
// stop a client deterministically. Without the tag it is an empty function
// that the compiler inlines away.
func failpoint(string, string) {}
