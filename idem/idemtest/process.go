package idemtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/idem"
)

// ChildEnv carries a child's job (JSON) when a test binary runs itself again
// as one of the replicas of ProcessDuplicates or KillMidRun.
const ChildEnv = "IDEMTEST_CHILD"

// Lease is the lease of the attempts' locks in the process tests: how long a
// killed attempt blocks its key.
const Lease = time.Second

// NewKeeper builds a child's Keeper over the stores at addr (whatever the
// test passed to ProcessDuplicates or KillMidRun); the locks it takes must
// have lease Lease. close releases what it opened.
type NewKeeper func(ctx context.Context, addr string) (k *idem.Keeper, close func(), err error)

type childJob struct {
	Mode string // "dup": wait for a line on stdin, then Do; "hold": Do with an fn that never returns
	Addr string
	Key  string
}

// RunChild runs the job in ChildEnv, if any, and reports whether it did; a
// TestMain then exits with code instead of running tests.
func RunChild(newKeeper NewKeeper) (code int, child bool) {
	spec := os.Getenv(ChildEnv)
	if spec == "" {
		return 0, false
	}
	var job childJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		fmt.Fprintln(os.Stderr, "child job:", err)
		return 2, true
	}
	if err := job.run(newKeeper); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1, true
	}
	return 0, true
}

func (job childJob) run(newKeeper NewKeeper) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, closeKeeper, err := newKeeper(ctx, job.Addr)
	if err != nil {
		return err
	}
	defer closeKeeper()
	fn := func(ctx context.Context, fence uint64) ([]byte, error) {
		fmt.Println("ran", fence)
		if job.Mode == "hold" {
			<-ctx.Done() // until killed
			return nil, ctx.Err()
		}
		// Work long enough for every duplicate to find the attempt running.
		t := time.NewTimer(200 * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []byte("done at " + strconv.FormatUint(fence, 10)), nil
	}
	fmt.Println("ready")
	if job.Mode == "dup" {
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return err
		}
	}
	r, err := k.Do(ctx, job.Key, []byte("request"), fn)
	if err != nil {
		return err
	}
	fmt.Printf("result %s\n", r.Value)
	return nil
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startChild(t *testing.T, job childJob) *child {
	t.Helper()
	spec, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ChildEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for range c.lines { // drain, so the reader ends
		}
	})
	return c
}

// next returns the child's next line that starts with prefix, failing the
// test if none comes within limit.
func (c *child) next(t *testing.T, prefix string, limit time.Duration) string {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("child %d ended before a line %q", c.cmd.Process.Pid, prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return strings.TrimSpace(strings.TrimPrefix(l, prefix))
			}
		case <-timer.C:
			t.Fatalf("no line %q from child %d within %v", prefix, c.cmd.Process.Pid, limit)
		}
	}
}

// ProcessDuplicates runs Duplicates processes (this test binary again, with
// ChildEnv: call RunChild in TestMain) that call Do for key at once, and
// checks that fn ran in exactly one and all got its result.
func ProcessDuplicates(t *testing.T, addr, key string) {
	children := make([]*child, Duplicates)
	for i := range children {
		children[i] = startChild(t, childJob{Mode: "dup", Addr: addr, Key: key})
	}
	for _, c := range children {
		c.next(t, "ready", 20*time.Second)
	}
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	results := map[string]int{}
	runs := 0
	for _, c := range children {
		for {
			l := c.next(t, "", 30*time.Second)
			if strings.HasPrefix(l, "ran ") {
				runs++
			}
			done := strings.HasPrefix(l, "result ")
			if done {
				results[strings.TrimPrefix(l, "result ")]++
			}
			if done {
				break
			}
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", c.cmd.Process.Pid, err)
		}
	}
	if runs != 1 || len(results) != 1 {
		t.Fatalf("fn ran %d times across %d processes, results %v; want 1 run and one result", runs, Duplicates, results)
	}
}

// KillMidRun starts a process whose fn for key never returns, kills it
// (SIGKILL) once fn runs, and returns the fence of the killed attempt. The
// key's lock stays held until Lease passes.
func KillMidRun(t *testing.T, addr, key string) uint64 {
	c := startChild(t, childJob{Mode: "hold", Addr: addr, Key: key})
	fence, err := strconv.ParseUint(c.next(t, "ran ", 20*time.Second), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	return fence
}
