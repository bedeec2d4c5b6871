// Package childproc runs a test binary again as client processes, each with
// a job of its own, the way replicas of a service run apart from each other.
//
// The parent starts the children (Start, StartAll), each of which connects,
// says it is ready (Ready) and waits for the word (AwaitGo); the parent
// lets them all go (Go) and reads each one's report (Result). The child
// side starts in TestMain with Main, before any test runs:
//
//	func TestMain(m *testing.M) {
//		if code, child := childproc.Main(childEnv, job.run); child {
//			os.Exit(code)
//		}
//		os.Exit(m.Run())
//	}
package childproc

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Main runs the job in the environment variable env, if it is set: it
// decodes the job (JSON) into a J and runs run. It reports whether this
// process is a child; if so, the caller exits with code: 0 when run
// returned nil, 1 when it failed (the error is on stderr), 2 when the job
// could not be decoded.
func Main[J any](env string, run func(J) error) (code int, child bool) {
	spec, ok := os.LookupEnv(env)
	if !ok {
		return 0, false
	}
	var job J
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		fmt.Fprintf(os.Stderr, "child job in %s: %v\n", env, err)
		return 2, true
	}
	if err := run(job); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1, true
	}
	return 0, true
}

// Ready tells the parent that the child is set up and waits for its go.
func Ready() { fmt.Println("ready") }

// AwaitGo waits until the parent says go.
func AwaitGo() error {
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return fmt.Errorf("waiting for the parent's go: %w", err)
	}
	if line != "go\n" {
		return fmt.Errorf("the parent said %q, not go", line)
	}
	return nil
}

// Report writes the child's result (JSON) for the parent's Result.
func Report(v any) error { return json.NewEncoder(os.Stdout).Encode(v) }

// Child is a running child process.
type Child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// Start starts the test binary as a child running job, which it encodes
// (JSON) into the environment variable env, and waits up to within until
// the child says ready. The child runs no test or benchmark of its own, is
// killed if this process dies, and is killed at tb's cleanup if it still
// runs.
func Start(tb testing.TB, env string, job any, within time.Duration) *Child {
	tb.Helper()
	c, err := launch(env, job, within)
	if c != nil {
		tb.Cleanup(c.Kill)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// StartAll starts one child per job at once, as Start does, since each
// takes a while to connect, and returns them in the order of jobs.
func StartAll[J any](tb testing.TB, env string, jobs []J, within time.Duration) []*Child {
	tb.Helper()
	cs := make([]*Child, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() { cs[i], errs[i] = launch(env, job, within) })
	}
	wg.Wait()
	for _, c := range cs {
		if c != nil {
			tb.Cleanup(c.Kill)
		}
	}
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("starting child processes: %v", err)
	}
	return cs
}

// launch starts a child and waits until it says ready. The caller kills it
// in any case once it is not nil.
func launch(env string, job any, within time.Duration) (*Child, error) {
	spec, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), env+"="+string(spec))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Child{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	return c, c.await("ready", within)
}

// Process is the child's process, to signal it.
func (c *Child) Process() *os.Process { return c.cmd.Process }

// Go lets the child go.
func (c *Child) Go() error {
	_, err := io.WriteString(c.stdin, "go\n")
	return err
}

// Kill ends the child, if it still runs, and reaps it.
func (c *Child) Kill() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// await waits up to within for the line want from the child.
func (c *Child) await(want string, within time.Duration) error {
	line := make(chan string, 1)
	go func() {
		s, _ := c.out.ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case got := <-line:
		if got != want {
			return fmt.Errorf("child said %q, want %q", got, want)
		}
		return nil
	case <-time.After(within):
		return fmt.Errorf("child did not say %q within %v", want, within)
	}
}

// Result decodes the child's report into v, waits for the child to exit,
// and fails tb if it could not read the report or the child failed.
func (c *Child) Result(tb testing.TB, v any) {
	tb.Helper()
	if err := json.NewDecoder(c.out).Decode(v); err != nil {
		tb.Fatalf("child's report: %v", err)
	}
	if err := c.cmd.Wait(); err != nil {
		tb.Fatalf("child: %v", err)
	}
}
