package cli

// Helpers for tests that drive the distlock binary as a user would: build
// it once per test binary, start it with os/exec, collect its exit code and
// output.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// processTimeout bounds every distlock process a test starts.
const processTimeout = 60 * time.Second

// built is the distlock binary the tests drive, built once per test binary
// into a directory TestMain removes. It is built without the race
// detector: its processes (a run, a hold, a bench, and the embedded etcd
// of each) took a third of the package's CPU under it, and most of them
// time the store, not the code. The code they run is raced where it runs
// in-process: the serve tests re-execute this race-built test binary
// (TestServeHelperProcess), and the server, the library and the backends
// have their own tests.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// buildDistlock returns the path of the distlock binary, building it on the
// first call.
func buildDistlock(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "distlock-test-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "distlock")
		out, err := exec.Command("go", "build", "-o", built.bin, "github.com/distlock/distlock/cmd/distlock").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatalf("go build distlock: %v", built.err)
	}
	return built.bin
}

// result is how a distlock process ended.
type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// stderrLines returns the non-empty lines distlock wrote on stderr.
func (r result) stderrLines() []string {
	return strings.FieldsFunc(r.stderr, func(c rune) bool { return c == '\n' })
}

// process is a distlock process started by a test.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	start          time.Time
	done           chan error
}

// startDistlock starts bin with args and the environment of the test plus
// env. The process is killed when the test ends, if it still runs.
func startDistlock(t testing.TB, bin string, env []string, stdin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdin = strings.NewReader(stdin)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start distlock %q: %v", args, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits up to timeout for the process to exit and returns how it
// ended; ok is false if it still runs.
func (p *process) wait(timeout time.Duration) (r result, ok bool) {
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		r = result{code: 0, stdout: p.stdout.String(), stderr: p.stderr.String(), elapsed: time.Since(p.start)}
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			r.code = ee.ExitCode()
			if ws, _ := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
				r.code = 128 + int(ws.Signal())
			}
		case err != nil:
			r.code = -1
			r.stderr += err.Error()
		}
		return r, true
	case <-time.After(timeout):
		return result{}, false
	}
}

// mustWait is wait that fails the test if the process outlives timeout.
func (p *process) mustWait(t testing.TB, timeout time.Duration) result {
	t.Helper()
	r, ok := p.wait(timeout)
	if !ok {
		t.Fatalf("distlock %q still runs after %v", p.cmd.Args[1:], timeout)
	}
	return r
}

// runDistlock runs bin with args to the end and returns how it ended.
func runDistlock(t testing.TB, bin string, env []string, args ...string) result {
	t.Helper()
	return startDistlock(t, bin, env, "", args...).mustWait(t, processTimeout)
}

// waitFor polls cond every 10ms until it holds or timeout passes, and
// reports whether it held.
func waitFor(timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// fileExists reports whether path exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
