package distlock

import (
	"testing"
	"time"
)

func TestBackoffIsCappedAndJittered(t *testing.T) {
	b := backoff{min: 2 * time.Millisecond, max: 50 * time.Millisecond}
	seen := map[time.Duration]bool{}
	for i := range 200 {
		d := b.next()
		if d < time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("delay %d = %v, outside [1ms, 50ms]", i, d)
		}
		seen[d] = true
	}
	if len(seen) < 20 {
		t.Fatalf("only %d distinct delays in 200: not jittered", len(seen))
	}
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"a", "order:42", "päivä/ü", string(make([]byte, 0)) + "x"} {
		if err := ValidateKey(k); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
}
