package driver_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/distlock/distlock/driver"
)

func TestWrap(t *testing.T) {
	dial := errors.New("dial tcp: refused")
	for _, c := range []struct {
		err  error
		want string
	}{
		{dial, "pglock: dial tcp: refused"},
		{driver.Wrap("pglock", dial), "pglock: dial tcp: refused"},
		{fmt.Errorf("%w: 3 of 3 permits held", driver.ErrNotAcquired), "distlock: not acquired: 3 of 3 permits held"},
		{fmt.Errorf("pglockx: %w", dial), "pglock: pglockx: dial tcp: refused"},
	} {
		got := driver.Wrap("pglock", c.err)
		if got.Error() != c.want || !errors.Is(got, c.err) {
			t.Errorf("Wrap(%q) = %q, want %q wrapping it", c.err, got, c.want)
		}
	}
	if driver.Wrap("pglock", nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
}
