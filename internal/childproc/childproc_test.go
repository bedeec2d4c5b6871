package childproc_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/internal/childproc"
)

const childEnv = "CHILDPROC_TEST_CHILD"

// echo is the children's job: after the go, report Text in upper case, or
// fail with it when Fail is set.
type echo struct {
	Text string
	Fail bool
}

type echoed struct{ Text string }

func (e echo) run() error {
	if e.Fail {
		return errors.New(e.Text)
	}
	childproc.Ready()
	if err := childproc.AwaitGo(); err != nil {
		return err
	}
	return childproc.Report(echoed{strings.ToUpper(e.Text)})
}

func TestMain(m *testing.M) {
	if code, child := childproc.Main(childEnv, echo.run); child {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

func TestChildren(t *testing.T) {
	cs := childproc.StartAll(t, childEnv, []echo{{Text: "a"}, {Text: "b"}}, time.Minute)
	for i, want := range []string{"A", "B"} {
		if err := cs[i].Go(); err != nil {
			t.Fatal(err)
		}
		var got echoed
		cs[i].Result(t, &got)
		if got.Text != want {
			t.Errorf("child %d reported %q, want %q", i, got.Text, want)
		}
	}
}

// A child's exit code says whether its job failed or could not be read.
func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		spec string
		code int
	}{{`{"Text":"boom","Fail":true}`, 1}, {`{"Text":`, 2}} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+c.spec)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != c.code {
			t.Errorf("job %s: %v (%s); want exit code %d", c.spec, err, out, c.code)
		}
	}
}
