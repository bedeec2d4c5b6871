package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testserver"
)

// holdProcess is a distlock hold whose stdout is a pipe the test reads
// while it runs, as a script reads it from a coproc or a fifo.
type holdProcess struct {
	*process
	lines chan string // stdout's lines, closed at its end of file
}

// startHold starts distlock hold with args. The process is killed when the
// test ends, if it still runs.
func startHold(t *testing.T, bin string, env []string, args ...string) *holdProcess {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: exec.Command(bin, append([]string{"hold"}, args...)...), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = w, &p.stderr
	p.start = time.Now()
	err = p.cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("start distlock hold %q: %v", args, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	h := &holdProcess{process: p, lines: make(chan string, 16)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			select {
			case h.lines <- sc.Text():
			default: // more lines than any hold prints: the test fails on the count
			}
		}
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		r.Close()
	})
	return h
}

// heldLine returns the line hold prints once it holds the lock.
func (h *holdProcess) heldLine(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			r := h.mustWait(t, processTimeout)
			t.Fatalf("hold closed stdout without a line: exit %d, stderr: %s", r.code, r.stderr)
		}
		return line
	case <-time.After(20 * time.Second):
		t.Fatal("hold printed no line within 20s")
	}
	return ""
}

// fence reads the "FENCE KEY" line hold prints once it holds key.
func (h *holdProcess) fence(t *testing.T, key string) uint64 {
	t.Helper()
	line := h.heldLine(t)
	f, k, ok := strings.Cut(line, " ")
	fence, err := strconv.ParseUint(f, 10, 64)
	if !ok || err != nil || k != key || fence == 0 {
		t.Fatalf("hold printed %q, want \"FENCE %s\"", line, key)
	}
	return fence
}

// signal sends sig to the process.
func (h *holdProcess) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := h.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// statusOf returns what distlock status -o json says of key.
func statusOf(t *testing.T, bin string, s store, key string) lockView {
	t.Helper()
	r := runDistlock(t, bin, s.env, "status", key, "-o", "json")
	if r.code != 0 {
		t.Fatalf("status %s: exit %d: %s", key, r.code, r.stderr)
	}
	var v lockView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("status -o json: %v: %s", err, r.stdout)
	}
	return v
}

func TestHold(t *testing.T) {
	bin := buildDistlock(t)
	s := newStore(t)

	t.Run("HoldsUntilSignal", func(t *testing.T) { testHoldUntilSignal(t, bin, s) })
	t.Run("Signals", func(t *testing.T) { testHoldSignals(t, bin, s) })
	t.Run("JSON", func(t *testing.T) { testHoldJSON(t, bin, s) })
	t.Run("ForceReleased", func(t *testing.T) { testHoldForceReleased(t, bin, s) })
	t.Run("WaitForever", func(t *testing.T) { testHoldWaitForever(t, bin, s) })
	t.Run("Unreachable", func(t *testing.T) { testHoldUnreachable(t, bin) })
}

// hold prints "FENCE KEY", closes stdout, and keeps the lock past several
// leases (renewing it): status sees it held, with that fence, and a second
// hold or run is refused, naming the holder. SIGTERM releases it; hold
// exits 0 and says nothing.
func testHoldUntilSignal(t *testing.T, bin string, s store) {
	const lease = time.Second
	h := startHold(t, bin, s.env, "deploy", "--lease", lease.String(), "--owner", "deploy@ci")
	fence := h.fence(t, "deploy")
	select {
	case line, ok := <-h.lines:
		if ok {
			t.Fatalf("hold printed a second line %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("hold did not close stdout within 5s of its line")
	}
	time.Sleep(3 * lease) // three leases: held only if renewed
	if r, ended := h.wait(100 * time.Millisecond); ended {
		t.Fatalf("hold exited %d while it should hold the lock: %s", r.code, r.stderr)
	}
	if r := runDistlock(t, bin, s.env, "status", "--exit-status", "deploy"); r.code != 0 {
		t.Fatalf("status --exit-status exited %d, want 0 (held): %s", r.code, r.stdout)
	}
	if v := statusOf(t, bin, s, "deploy"); v.Fence != fence || v.Owner != "deploy@ci" {
		t.Errorf("status says fence %d owner %q, want %d and deploy@ci", v.Fence, v.Owner, fence)
	}
	second := startHold(t, bin, s.env, "--key", "deploy", "--wait", "0")
	r := second.mustWait(t, processTimeout)
	if r.code != ExitNotAcquired {
		t.Fatalf("a second hold exited %d, want %d: %s", r.code, ExitNotAcquired, r.stderr)
	}
	wantOneLine(t, r, `hold: "deploy" is held by deploy@ci (fence `+strconv.FormatUint(fence, 10))
	if _, ok := <-second.lines; ok {
		t.Error("the second hold printed a line on stdout")
	}

	h.signal(t, syscall.SIGTERM)
	r = h.mustWait(t, processTimeout)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("after SIGTERM hold exited %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	if v := statusOf(t, bin, s, "deploy"); v.Held {
		t.Error("status says the key is still held after hold exited")
	}
}

// SIGINT and SIGHUP end a hold as SIGTERM does: released, exit 0.
func testHoldSignals(t *testing.T, bin string, s store) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		h := startHold(t, bin, s.env, "signals")
		h.fence(t, "signals")
		h.signal(t, sig)
		r := h.mustWait(t, processTimeout)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("%v: exit %d, stderr %q; want 0 and nothing", sig, r.code, r.stderr)
		}
		if s.held(t, "signals") {
			t.Fatalf("%v: the lock is still held after hold exited", sig)
		}
	}
}

// -o json prints one object on one line: key, fence, owner, lease.
func testHoldJSON(t *testing.T, bin string, s store) {
	h := startHold(t, bin, s.env, "json", "-o", "json", "--owner", "ci", "--lease", "5s")
	line := h.heldLine(t)
	var v struct {
		Key     string `json:"key"`
		Fence   uint64 `json:"fence"`
		Owner   string `json:"owner"`
		LeaseMS int64  `json:"lease_ms"`
	}
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("hold -o json printed %q: %v", line, err)
	}
	if st := statusOf(t, bin, s, "json"); v.Key != "json" || v.Fence != st.Fence || v.Owner != "ci" || v.LeaseMS != 5000 {
		t.Errorf("hold -o json printed %+v, want key json, fence %d, owner ci, lease_ms 5000", v, st.Fence)
	}
	h.signal(t, syscall.SIGTERM)
	if r := h.mustWait(t, processTimeout); r.code != 0 {
		t.Errorf("exit %d after SIGTERM: %s", r.code, r.stderr)
	}
}

// A forced release ends the hold at once: exit 76 and one line saying why,
// long before the next renewal (a third of the 30s lease).
func testHoldForceReleased(t *testing.T, bin string, s store) {
	h := startHold(t, bin, s.env, "forced")
	h.fence(t, "forced")
	forced := time.Now()
	if r := runDistlock(t, bin, s.env, "release", "--force", "--yes", "forced", "--reason", "test"); r.code != 0 {
		t.Fatalf("release --force exited %d: %s", r.code, r.stderr)
	}
	r := h.mustWait(t, processTimeout)
	took := time.Since(forced)
	if r.code != ExitLockLost {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, ExitLockLost, r.stderr)
	}
	wantOneLine(t, r, `hold: lock "forced" lost: the key was deleted (deleted)`)
	if took > 5*time.Second {
		t.Errorf("hold exited %v after the forced release, want long before the next renewal at 10s", took)
	}
}

// --wait forever waits for a held key, then holds it; --wait D gives up
// after D with exit 75.
func testHoldWaitForever(t *testing.T, bin string, s store) {
	first := startHold(t, bin, s.env, "queue")
	fence := first.fence(t, "queue")
	const wait = 300 * time.Millisecond
	r := startHold(t, bin, s.env, "queue", "--wait", wait.String()).mustWait(t, processTimeout)
	if r.code != ExitNotAcquired || r.elapsed < wait {
		t.Errorf("--wait %v: exit %d after %v, want %d after at least the wait; stderr: %s", wait, r.code, r.elapsed, ExitNotAcquired, r.stderr)
	}
	second := startHold(t, bin, s.env, "queue", "--wait", "forever")
	if r, ended := second.wait(time.Second); ended {
		t.Fatalf("--wait forever on a held key ended at once: exit %d, %s", r.code, r.stderr)
	}
	first.signal(t, syscall.SIGTERM)
	if r := first.mustWait(t, processTimeout); r.code != 0 {
		t.Fatalf("the first hold exited %d: %s", r.code, r.stderr)
	}
	if next := second.fence(t, "queue"); next <= fence {
		t.Errorf("the second hold's fence %d is not above the first's %d", next, fence)
	}
	second.signal(t, syscall.SIGTERM)
	if r := second.mustWait(t, processTimeout); r.code != 0 {
		t.Errorf("the second hold exited %d: %s", r.code, r.stderr)
	}
}

// A store that cannot be reached is ExitUnavailable, with nothing on stdout.
func testHoldUnreachable(t *testing.T, bin string) {
	url := fmt.Sprintf("redis://127.0.0.1:%d?dial_timeout=300ms", testserver.FreePort(t))
	h := startHold(t, bin, nil, "--backend", url, "k")
	r := h.mustWait(t, processTimeout)
	if r.code != ExitUnavailable {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, ExitUnavailable, r.stderr)
	}
	wantOneLine(t, r, "hold: ", "connection refused")
	if line, ok := <-h.lines; ok {
		t.Errorf("hold printed %q on stdout", line)
	}
}

// Bad input gives one line and exit 2, and touches no store.
func TestHoldBadInput(t *testing.T) {
	bin := buildDistlock(t)
	s := newStore(t)
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"no key", []string{"hold"}, "hold: no key: want distlock hold KEY or --key KEY"},
		{"two keys", []string{"hold", "a", "b"}, "hold takes one KEY, got 2"},
		{"key twice", []string{"hold", "--key", "a", "b"}, "give the key once"},
		{"bad key", []string{"hold", "a\x01b"}, "invalid key"},
		{"lease too short", []string{"hold", "k", "--lease", "1ms"}, "hold: --lease 1ms: want at least 10ms"},
		{"malformed lease", []string{"hold", "k", "--lease", "3x"}, `invalid argument "3x" for "--lease"`},
		{"negative wait", []string{"hold", "k", "--wait", "-1s"}, "hold: --wait -1s: cannot be negative"},
		{"wait neither a duration nor forever", []string{"hold", "k", "--wait", "someday"}, `invalid argument "someday" for "--wait"`},
		{"negative max-hold", []string{"hold", "k", "--max-hold", "-1s"}, "hold: --max-hold -1s: cannot be negative"},
		{"bad output", []string{"hold", "k", "-o", "yaml"}, `-o "yaml": want text or json`},
		{"unknown flag", []string{"hold", "k", "--at-least", "1s"}, "unknown flag: --at-least"},
		{"unknown scheme", []string{"hold", "k", "--backend", "nope://x"}, "forgotten import"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := connections(t, s)
			r := runDistlock(t, bin, s.env, tc.args...)
			if r.code != ExitUsage {
				t.Errorf("exit %d, want %d", r.code, ExitUsage)
			}
			wantOneLine(t, r, tc.says)
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			if after := connections(t, s); after != before+1 { // +1: the probe itself
				t.Errorf("the store saw %d connections besides the test's", after-before-1)
			}
		})
	}
	if n := s.redis(t, "DBSIZE"); n != "0" {
		t.Errorf("DBSIZE %s after bad input, want 0", n)
	}
}

// hold --help shows how a script brackets work with it.
func TestHoldHelp(t *testing.T) {
	bin := buildDistlock(t)
	r := runDistlock(t, bin, nil, "hold", "--help")
	if r.code != 0 {
		t.Fatalf("hold --help exited %d: %s", r.code, r.stderr)
	}
	_, examples, ok := strings.Cut(r.stdout, "Examples:\n")
	if !ok || !strings.Contains(examples, "distlock hold ") || !strings.Contains(examples, "coproc") {
		t.Errorf("hold --help has no example of distlock hold in a coproc:\n%s", r.stdout)
	}
}
