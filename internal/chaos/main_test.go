package chaos

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// runChild, set by the scenario runner in builds with the chaos tag, runs
// this binary as one of a scenario's client processes when asked to.
var runChild func() (code int, child bool)

func TestMain(m *testing.M) {
	if runChild != nil {
		if code, child := runChild(); child {
			os.Exit(code)
		}
	}
	goleak.VerifyTestMain(m)
}
