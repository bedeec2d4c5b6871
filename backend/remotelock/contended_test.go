package remotelock

import (
	"fmt"
	"testing"
	"time"
)

// A key is contended for a second after a try found it held, and the
// memory of contended keys is bounded.
func TestContendedKeys(t *testing.T) {
	var c contendedKeys
	now := time.Now()
	if c.recent("k", now) {
		t.Fatal("a key no try found held is contended")
	}
	c.mark("k", now)
	if !c.recent("k", now.Add(contendedFor-time.Millisecond)) {
		t.Error("a key is not contended just after a try found it held")
	}
	if c.recent("k", now.Add(contendedFor)) {
		t.Error("a key is still contended a second after a try found it held")
	}
	for i := range maxContended + 1 {
		c.mark(fmt.Sprint(i), now)
	}
	if n := len(c.seen); n > maxContended {
		t.Errorf("%d keys remembered, want at most %d", n, maxContended)
	}
}
