package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testserver"
)

// store is a real redis-server that distlock processes use.
type store struct {
	addr string
	env  []string // DISTLOCK_BACKEND for it
}

// newStore starts a redis-server for t.
func newStore(t *testing.T) store {
	t.Helper()
	s := testserver.Redis(t)
	return store{addr: s.Addr(), env: []string{"DISTLOCK_BACKEND=redis://" + s.Addr()}}
}

// redis sends one command to the store.
func (s store) redis(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := testserver.RedisCommand(ctx, s.addr, args...)
	if err != nil {
		t.Fatalf("redis %q: %v", args, err)
	}
	return out
}

// held reports whether key is held, from the lock's own Redis key
// (backend/redislock's layout with its default prefix).
func (s store) held(t *testing.T, key string) bool {
	return s.redis(t, "EXISTS", lockName(key)) == "1"
}

// lockName is the Redis name of the lock key (no braces or backslashes in
// the test keys, so no escaping).
func lockName(key string) string { return "distlock:{" + key + "}" }

// waitingJob is a shell command for distlock run that runs setup, notes
// that it started (the file started in dir, with its pid, written whole by
// a rename), then waits, at most 30s, for the file go in dir. Its own stderr is discarded, so that what the
// tests read there is distlock's (sh reports a child killed by a signal).
func waitingJob(dir, setup string) string {
	return fmt.Sprintf(`exec 2>/dev/null
%s
echo $$ > %[2]q.tmp && mv %[2]q.tmp %[2]q
i=0; while [ ! -e %[3]q ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done`,
		setup, filepath.Join(dir, "started"), filepath.Join(dir, "go"))
}

// awaitStart waits until the job in dir has started.
func awaitStart(t testing.TB, dir string) {
	t.Helper()
	if !waitFor(20*time.Second, func() bool { return fileExists(filepath.Join(dir, "started")) }) {
		t.Fatal("the command did not start within 20s")
	}
}

// letGo lets the job in dir finish.
func letGo(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// readFile returns the content of path, or "" if it does not exist.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// wantOneLine fails unless r's stderr is one line containing each of want.
func wantOneLine(t *testing.T, r result, want ...string) {
	t.Helper()
	if lines := r.stderrLines(); len(lines) != 1 {
		t.Fatalf("stderr has %d lines, want 1:\n%s", len(lines), r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr %q does not say %q", r.stderr, w)
		}
	}
}

func TestRun(t *testing.T) {
	bin := buildDistlock(t)
	s := newStore(t)

	t.Run("ExactlyOnce", func(t *testing.T) { testRunExactlyOnce(t, bin, s) })
	t.Run("ExitCode", func(t *testing.T) { testRunExitCode(t, bin, s) })
	t.Run("Environment", func(t *testing.T) { testRunEnvironment(t, bin, s) })
	t.Run("LockDeleted", func(t *testing.T) { testRunLockDeleted(t, bin, s) })
	t.Run("ForceReleased", func(t *testing.T) { testRunForceReleased(t, bin, s.env, forcedOnRedis) })
	t.Run("GraceThenKill", func(t *testing.T) { testRunGraceThenKill(t, bin, s) })
	t.Run("MaxHold", func(t *testing.T) { testRunMaxHold(t, bin, s) })
	t.Run("SignalForwarding", func(t *testing.T) { testRunSignalForwarding(t, bin, s) })
	t.Run("AtLeast", func(t *testing.T) { testRunAtLeast(t, bin, s) })
	t.Run("HeldElsewhere", func(t *testing.T) { testRunHeldElsewhere(t, bin, s) })
	t.Run("WaitForever", func(t *testing.T) { testRunWaitForever(t, bin, s) })
	t.Run("ConflictExitCode", func(t *testing.T) { testRunConflictExitCode(t, bin, s) })
	t.Run("ShellString", func(t *testing.T) { testRunShellString(t, bin, s) })
	t.Run("Stdin", func(t *testing.T) { testRunStdin(t, bin, s) })
	t.Run("Permits", func(t *testing.T) { testRunPermits(t, bin, s) })
	t.Run("SharedExclusive", func(t *testing.T) { testRunSharedExclusive(t, bin, s) })
	t.Run("DistlockKilled", func(t *testing.T) { testRunDistlockKilled(t, bin, s) })
	t.Run("OncePer", func(t *testing.T) { testRunOncePer(t, bin, s) })
	t.Run("OncePerFailed", func(t *testing.T) { testRunOncePerFailed(t, bin, s) })
	t.Run("OncePerRecords", func(t *testing.T) { testRunOncePerRecords(t, bin, s) })
	t.Run("Unreachable", func(t *testing.T) { testRunUnreachable(t, bin) })
}

// Three distlock run started together on one key run the command once; the
// others exit ExitNotAcquired with one line naming the holder.
func testRunExactlyOnce(t *testing.T, bin string, s store) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	script := waitingJob(dir, fmt.Sprintf("echo ran >> %q", runs))
	const n = 3
	procs := make([]*process, n)
	for i := range procs {
		procs[i] = startDistlock(t, bin, s.env, "", "run", "--key", "once", "--", "sh", "-c", script)
	}
	// The losers exit while the winner waits for go.
	running := map[*process]bool{}
	for _, p := range procs {
		running[p] = true
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(running) > 1 && time.Now().Before(deadline) {
		for p := range running {
			r, ok := p.wait(10 * time.Millisecond)
			if !ok {
				continue
			}
			delete(running, p)
			if r.code != ExitNotAcquired {
				t.Fatalf("a loser exited %d, want %d; stderr: %s", r.code, ExitNotAcquired, r.stderr)
			}
			wantOneLine(t, r, `"once" is held by`, "the command was not run")
		}
	}
	if len(running) != 1 {
		t.Fatalf("%d distlock run still run after 20s, want 1", len(running))
	}
	var winner *process
	for p := range running {
		winner = p
	}
	letGo(t, dir)
	if r := winner.mustWait(t, processTimeout); r.code != 0 || r.stderr != "" {
		t.Fatalf("the winner exited %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	if got := readFile(t, runs); got != "ran\n" {
		t.Fatalf("the command ran %d times, want once", strings.Count(got, "ran"))
	}
	if s.held(t, "once") {
		t.Fatal("the lock is still held after the run")
	}
}

// distlock exits with the command's exit code, 128+N for signal N, and the
// lock is released either way.
func testRunExitCode(t *testing.T, bin string, s store) {
	for _, tc := range []struct {
		script string
		code   int
		says   string
	}{
		{"exit 0", 0, ""},
		{"exit 7", 7, "sh exited with status 7"},
		{"kill -KILL $$", 128 + 9, "sh was killed by SIGKILL (signal 9)"},
		{"kill -TERM $$", 128 + 15, "sh was killed by SIGTERM (signal 15)"},
	} {
		r := runDistlock(t, bin, s.env, "run", "--key", "exit-code", "--", "sh", "-c", tc.script)
		if r.code != tc.code {
			t.Errorf("%s: exit %d, want %d; stderr: %s", tc.script, r.code, tc.code, r.stderr)
		}
		if tc.says == "" && r.stderr != "" {
			t.Errorf("%s: stderr %q, want nothing", tc.script, r.stderr)
		}
		if tc.says != "" {
			wantOneLine(t, r, tc.says)
		}
		if s.held(t, "exit-code") {
			t.Fatalf("%s: the lock is still held after the run", tc.script)
		}
	}
}

// The command gets DISTLOCK_KEY and DISTLOCK_FENCE (the fence status
// reports), and the token appears nowhere in its environment.
func testRunEnvironment(t *testing.T, bin string, s store) {
	dir := t.TempDir()
	envFile := filepath.Join(dir, "env")
	p := startDistlock(t, bin, s.env, "", "run", "--key", "env", "--", "sh", "-c", waitingJob(dir, "env > "+envFile))
	awaitStart(t, dir)
	token := s.redis(t, "GET", lockName("env"))
	st := runDistlock(t, bin, s.env, "status", "env", "-o", "json")
	letGo(t, dir)
	if r := p.mustWait(t, processTimeout); r.code != 0 {
		t.Fatalf("run exited %d: %s", r.code, r.stderr)
	}
	var v lockView
	if err := json.Unmarshal([]byte(st.stdout), &v); err != nil {
		t.Fatalf("status -o json: %v: %s", err, st.stdout)
	}
	env := readFile(t, envFile)
	for _, want := range []string{"DISTLOCK_KEY=env\n", "DISTLOCK_FENCE=" + strconv.FormatUint(v.Fence, 10) + "\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("the command's environment lacks %q", want)
		}
	}
	if token == "" || strings.Contains(env, token) {
		t.Errorf("the command's environment holds the token %q (or the token was not read)", token)
	}
}

// A lock deleted behind a running command: the command's group gets SIGTERM
// within the lease, distlock exits ExitLockLost naming the reason.
func testRunLockDeleted(t *testing.T, bin string, s store) {
	const lease = time.Second
	dir := t.TempDir()
	trapped := filepath.Join(dir, "trapped")
	setup := fmt.Sprintf(`trap 'echo TERM > %q; exit 0' TERM`, trapped)
	p := startDistlock(t, bin, s.env, "", "run", "--key", "deleted", "--lease", lease.String(), "--", "sh", "-c", waitingJob(dir, setup))
	awaitStart(t, dir)
	deleted := time.Now()
	if n := s.redis(t, "DEL", lockName("deleted")); n != "1" {
		t.Fatalf("DEL the lock: %s keys deleted, want 1", n)
	}
	r := p.mustWait(t, processTimeout)
	took := time.Since(deleted)
	if r.code != ExitLockLost {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, ExitLockLost, r.stderr)
	}
	wantOneLine(t, r, `lock "deleted" lost while the command ran: the key was deleted (deleted): it is free`, "stopped with SIGTERM")
	if readFile(t, trapped) != "TERM\n" {
		t.Error("the command did not get SIGTERM")
	}
	if took > lease {
		t.Errorf("the command ended %v after the lock was deleted, want within the lease %v", took, lease)
	}
	t.Logf("lock deleted → command stopped and distlock exited in %v (lease %v)", took, lease)
}

// What run says of a forced release: on Redis the notice says what became
// of the key; elsewhere the store says only that the hold is gone.
const (
	forcedOnRedis   = "the key was deleted (deleted)"
	forcedElsewhere = "the store reported the lock gone (store_deleted)"
)

// A forced release (distlock release --force) stops the command at once:
// the holder hears the release's notice, long before its next renewal (a
// third of the default 30 s lease), and says why with reason.
func testRunForceReleased(t *testing.T, bin string, env []string, reason string) {
	dir := t.TempDir()
	p := startDistlock(t, bin, env, "", "run", "--key", "forced", "--", "sh", "-c", waitingJob(dir, ""))
	awaitStart(t, dir)
	forced := time.Now()
	if r := runDistlock(t, bin, env, "release", "--force", "--yes", "forced", "--reason", "the job hung"); r.code != 0 {
		t.Fatalf("release --force exited %d: %s", r.code, r.stderr)
	}
	r := p.mustWait(t, processTimeout)
	took := time.Since(forced)
	if r.code != ExitLockLost {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, ExitLockLost, r.stderr)
	}
	wantOneLine(t, r, `lock "forced" lost while the command ran: `+reason, "stopped with SIGTERM")
	if took > 5*time.Second {
		t.Errorf("the command ended %v after the forced release, want long before the next renewal at 10s", took)
	}
	t.Logf("forced release → command stopped and distlock exited in %v (including the release command's own run)", took)
}

// Over the lock service too, a forced release stops the command at once:
// run follows the service's event stream for its lock unless the URL says
// watch_loss=false.
func TestRunForceReleasedOverService(t *testing.T) {
	bin := buildDistlock(t)
	p := startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	testRunForceReleased(t, bin, []string{"DISTLOCK_BACKEND=distlock://" + p.banner.Listen}, forcedElsewhere)
}

// On etcd and ZooKeeper too a forced release stops the command at once:
// the holder's watch of its hold sees it.
func TestRunForceReleasedOnWatchingStores(t *testing.T) {
	bin := buildDistlock(t)
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"etcd", func(t *testing.T) string { return "etcd://" + testserver.Etcd(t).Addr() }},
		{"zookeeper", func(t *testing.T) string { return "zk://" + testserver.ZooKeeper(t).Addr() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testRunForceReleased(t, bin, []string{"DISTLOCK_BACKEND=" + tc.url(t)}, forcedElsewhere)
		})
	}
}

// A command that ignores SIGTERM is killed after --grace.
func testRunGraceThenKill(t *testing.T, bin string, s store) {
	const grace = 300 * time.Millisecond
	dir := t.TempDir()
	p := startDistlock(t, bin, s.env, "", "run", "--key", "grace", "--lease", "1s", "--grace", grace.String(),
		"--", "sh", "-c", waitingJob(dir, "trap '' TERM"))
	awaitStart(t, dir)
	deleted := time.Now()
	s.redis(t, "DEL", lockName("grace"))
	r := p.mustWait(t, processTimeout)
	if r.code != ExitLockLost {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, ExitLockLost, r.stderr)
	}
	wantOneLine(t, r, "did not stop within --grace 300ms and was killed with SIGKILL")
	if took := time.Since(deleted); took < grace {
		t.Errorf("distlock exited %v after the loss, before --grace %v", took, grace)
	}
}

// --max-hold stops renewal and the command, naming the reason.
func testRunMaxHold(t *testing.T, bin string, s store) {
	dir := t.TempDir()
	p := startDistlock(t, bin, s.env, "", "run", "--key", "max-hold", "--max-hold", "300ms", "--lease", "1s",
		"--", "sh", "-c", waitingJob(dir, "trap 'exit 0' TERM"))
	r := p.mustWait(t, processTimeout)
	if r.code != ExitLockLost {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, ExitLockLost, r.stderr)
	}
	// The store still holds the lock: distlock says it releases it, then why
	// it exits.
	lines := r.stderrLines()
	if len(lines) != 2 {
		t.Fatalf("stderr has %d lines, want 2 (the release's wait, then the loss):\n%s", len(lines), r.stderr)
	}
	if want := fmt.Sprintf(`distlock: run: lock "max-hold" was lost; releasing it (up to %v) ...`, lostReleaseBound); lines[0] != want {
		t.Errorf("stderr's first line is %q, want %q", lines[0], want)
	}
	if want := `lock "max-hold" lost while the command ran: --max-hold reached (max_hold)`; !strings.Contains(lines[1], want) {
		t.Errorf("stderr's last line %q does not say %q", lines[1], want)
	}
	if s.held(t, "max-hold") {
		t.Error("the lock is still held after distlock exited")
	}
}

// SIGTERM and SIGINT to distlock reach the command, and the lock is
// released once the command has exited.
func testRunSignalForwarding(t *testing.T, bin string, s store) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		dir := t.TempDir()
		got := filepath.Join(dir, "got")
		name := strings.TrimPrefix(fmt.Sprint(sig), "SIG")
		setup := fmt.Sprintf(`trap 'echo %[1]s > %[2]q; sleep 0.2; exit 3' %[1]s`, unixName(sig), got)
		p := startDistlock(t, bin, s.env, "", "run", "--key", "signals", "--", "sh", "-c", waitingJob(dir, setup))
		awaitStart(t, dir)
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		r := p.mustWait(t, processTimeout)
		if r.code != 3 {
			t.Fatalf("%s: exit %d, want the command's 3; stderr: %s", name, r.code, r.stderr)
		}
		if want := unixName(sig) + "\n"; readFile(t, got) != want {
			t.Errorf("%s: the command did not see the signal", name)
		}
		if s.held(t, "signals") {
			t.Errorf("%s: the lock is still held after distlock exited", name)
		}
	}
}

// unixName is the name of sig for a shell's trap.
func unixName(sig syscall.Signal) string {
	if sig == syscall.SIGINT {
		return "INT"
	}
	return "TERM"
}

// --at-least keeps the lock after a command that ends at once, then
// releases it.
func testRunAtLeast(t *testing.T, bin string, s store) {
	const atLeast = 1500 * time.Millisecond
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	p := startDistlock(t, bin, s.env, "", "run", "--key", "at-least", "--at-least", atLeast.String(), "--", "touch", ran)
	if !waitFor(20*time.Second, func() bool { return fileExists(ran) }) {
		t.Fatal("the command did not run within 20s")
	}
	if !s.held(t, "at-least") {
		t.Fatal("the lock is free right after the command ended")
	}
	if r := runDistlock(t, bin, s.env, "run", "--key", "at-least", "--", "true"); r.code != ExitNotAcquired {
		t.Fatalf("a second run during --at-least exited %d, want %d", r.code, ExitNotAcquired)
	}
	r := p.mustWait(t, processTimeout)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	if r.elapsed < atLeast || r.elapsed > atLeast+5*time.Second {
		t.Errorf("distlock ran %v, want a little over --at-least %v", r.elapsed, atLeast)
	}
	if s.held(t, "at-least") {
		t.Error("the lock is still held after --at-least")
	}
}

// A key held elsewhere: ExitNotAcquired after --wait, or 0 and silence with
// --skip-ok.
func testRunHeldElsewhere(t *testing.T, bin string, s store) {
	dir := t.TempDir()
	holder := startDistlock(t, bin, s.env, "", "run", "--key", "busy", "--owner", "nightly@web-1", "--", "sh", "-c", waitingJob(dir, ""))
	awaitStart(t, dir)
	defer func() {
		letGo(t, dir)
		holder.mustWait(t, processTimeout)
	}()
	if r := runDistlock(t, bin, s.env, "run", "--key", "busy", "--skip-ok", "--", "false"); r.code != 0 || r.stderr != "" {
		t.Errorf("--skip-ok: exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	const wait = 300 * time.Millisecond
	r := runDistlock(t, bin, s.env, "run", "--key", "busy", "--wait", wait.String(), "--", "false")
	if r.code != ExitNotAcquired {
		t.Fatalf("--wait: exit %d, want %d; stderr %q", r.code, ExitNotAcquired, r.stderr)
	}
	wantOneLine(t, r, `"busy" is held by nightly@web-1 (fence `)
	if r.elapsed < wait {
		t.Errorf("--wait %v: gave up after %v", wait, r.elapsed)
	}
}

// --conflict-exit-code N (flock -E) is the exit code of a key held
// elsewhere after --wait, with the same line naming the holder.
func testRunConflictExitCode(t *testing.T, bin string, s store) {
	dir := t.TempDir()
	holder := startDistlock(t, bin, s.env, "", "run", "--key", "conflict", "--owner", "nightly@web-1", "--", "sh", "-c", waitingJob(dir, ""))
	awaitStart(t, dir)
	defer func() {
		letGo(t, dir)
		holder.mustWait(t, processTimeout)
	}()
	for _, code := range []int{3, 0, 255} {
		r := runDistlock(t, bin, s.env, "run", "--key", "conflict", "--wait", "100ms", "--conflict-exit-code", strconv.Itoa(code), "--", "false")
		if r.code != code {
			t.Errorf("--conflict-exit-code %d: exit %d; stderr: %s", code, r.code, r.stderr)
			continue
		}
		wantOneLine(t, r, `"conflict" is held by nightly@web-1 (fence `, "the command was not run")
	}
}

// -c STRING (flock -c) runs the string with /bin/sh -c under the lock:
// its exit code passes through, it gets the lock's environment, and a
// signal to distlock reaches it as it reaches a command after --.
func testRunShellString(t *testing.T, bin string, s store) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	r := runDistlock(t, bin, s.env, "run", "--key", "shell", "-c", fmt.Sprintf(`echo "$DISTLOCK_KEY $0" > %q; exit 5`, out))
	if r.code != 5 {
		t.Fatalf("-c: exit %d, want the string's 5; stderr: %s", r.code, r.stderr)
	}
	wantOneLine(t, r, "exited with status 5")
	if got := readFile(t, out); got != "shell /bin/sh\n" {
		t.Errorf("-c wrote %q, want %q", got, "shell /bin/sh\n")
	}
	if s.held(t, "shell") {
		t.Fatal("the lock is still held after the run")
	}

	got := filepath.Join(dir, "got")
	p := startDistlock(t, bin, s.env, "", "run", "--key", "shell", "-c",
		waitingJob(dir, fmt.Sprintf(`trap 'echo TERM > %q; exit 3' TERM`, got)))
	awaitStart(t, dir)
	if !s.held(t, "shell") {
		t.Fatal("the lock is not held while -c runs")
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := p.mustWait(t, processTimeout); r.code != 3 {
		t.Fatalf("SIGTERM: exit %d, want the string's 3; stderr: %s", r.code, r.stderr)
	}
	if readFile(t, got) != "TERM\n" {
		t.Error("the shell string did not get the SIGTERM sent to distlock")
	}
	if s.held(t, "shell") {
		t.Error("the lock is still held after distlock exited")
	}
}

// A stdin that is not a terminal passes to the command whole (consul lock
// needs -pass-stdin for that), to its end, for a command after -- and for -c.
func testRunStdin(t *testing.T, bin string, s store) {
	in := strings.Repeat("a line for the command\n", 10000) + "last"
	for _, args := range [][]string{{"--", "cat"}, {"-c", `read first; echo "$first"; cat`}} {
		p := startDistlock(t, bin, s.env, in, append([]string{"run", "--key", "stdin"}, args...)...)
		r := p.mustWait(t, processTimeout)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("%q: exit %d, stderr %q; want 0 and nothing", args, r.code, r.stderr)
		}
		if r.stdout != in {
			t.Errorf("%q: the command read %d bytes of stdin (ends %q), want %d", args, len(r.stdout), r.stdout[max(0, len(r.stdout)-20):], len(in))
		}
	}
}

// run -n N (consul lock -n) runs at most N commands at once over the
// semaphore KEY: two run together with -n 2, a third exits 75 naming the
// permits, or with --wait runs once a permit is freed. The command gets
// DISTLOCK_KEY and DISTLOCK_PERMITS, and no DISTLOCK_FENCE.
func testRunPermits(t *testing.T, bin string, s store) {
	dirs := []string{t.TempDir(), t.TempDir()}
	envFile := filepath.Join(dirs[0], "env")
	holders := make([]*process, len(dirs))
	for i, dir := range dirs {
		holders[i] = startDistlock(t, bin, s.env, "", "run", "--key", "permits", "-n", "2", "--owner", fmt.Sprintf("worker-%d", i),
			"--", "sh", "-c", waitingJob(dir, "env > "+filepath.Join(dir, "env")))
	}
	for _, dir := range dirs {
		awaitStart(t, dir)
	}
	env := readFile(t, envFile)
	for _, want := range []string{"DISTLOCK_KEY=permits\n", "DISTLOCK_PERMITS=2\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("the command's environment lacks %q", want)
		}
	}
	if strings.Contains(env, "DISTLOCK_FENCE=") {
		t.Error("a permit's command got DISTLOCK_FENCE")
	}

	r := runDistlock(t, bin, s.env, "run", "--key", "permits", "-n", "2", "--", "false")
	if r.code != ExitNotAcquired {
		t.Fatalf("a third run with -n 2: exit %d, want %d; stderr: %s", r.code, ExitNotAcquired, r.stderr)
	}
	wantOneLine(t, r, `all 2 permits of "permits" are held`, "worker-0", "worker-1", "the command was not run")

	ran := filepath.Join(t.TempDir(), "ran")
	waiter := startDistlock(t, bin, s.env, "", "run", "--key", "permits", "-n", "2", "--wait", "30s", "--", "touch", ran)
	if r, ended := waiter.wait(500 * time.Millisecond); ended || fileExists(ran) {
		t.Fatalf("a third run with -n 2 --wait ran while both permits were held: exit %d, %s", r.code, r.stderr)
	}
	letGo(t, dirs[0])
	if r := holders[0].mustWait(t, processTimeout); r.code != 0 {
		t.Fatalf("the first holder exited %d: %s", r.code, r.stderr)
	}
	if r := waiter.mustWait(t, processTimeout); r.code != 0 || r.stderr != "" || !fileExists(ran) {
		t.Fatalf("the waiter exited %d, stderr %q, ran %v; want 0, nothing and ran once a permit was free", r.code, r.stderr, fileExists(ran))
	}
	letGo(t, dirs[1])
	if r := holders[1].mustWait(t, processTimeout); r.code != 0 {
		t.Fatalf("the second holder exited %d: %s", r.code, r.stderr)
	}
	if s.held(t, "permits") {
		t.Error("run -n took the lock KEY, not a permit of the semaphore KEY")
	}
}

// run -n over a store that keeps no semaphores (Redlock over three real
// redis-servers) exits 1 saying so, and the command does not run.
func TestRunPermitsUnsupported(t *testing.T) {
	bin := buildDistlock(t)
	var nodes []string
	for range 3 {
		nodes = append(nodes, testserver.Redis(t).Addr())
	}
	ran := filepath.Join(t.TempDir(), "ran")
	r := runDistlock(t, bin, []string{"DISTLOCK_BACKEND=redlock://" + strings.Join(nodes, ",")}, "run", "--key", "permits", "-n", "2", "--", "touch", ran)
	if r.code != ExitError {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, ExitError, r.stderr)
	}
	wantOneLine(t, r, "run: -n: ", "redlock keeps no semaphores")
	if fileExists(ran) {
		t.Error("the command ran without a permit")
	}
}

// run --shared and --exclusive (flock -s, -x) take KEY as a reader or the
// writer of the read-write lock KEY: two shared runs hold at once, an
// exclusive run exits 75 naming them, or with --wait runs once they have
// ended; while it holds, a shared run waits. A shared command gets no
// DISTLOCK_FENCE, an exclusive one does; the lock KEY stays free.
func testRunSharedExclusive(t *testing.T, bin string, s store) {
	readers := []string{t.TempDir(), t.TempDir()}
	procs := make([]*process, len(readers))
	for i, dir := range readers {
		procs[i] = startDistlock(t, bin, s.env, "", "run", "--key", "rw", "--shared", "--owner", fmt.Sprintf("reader-%d", i),
			"--", "sh", "-c", waitingJob(dir, "env > "+filepath.Join(dir, "env")))
	}
	for _, dir := range readers {
		awaitStart(t, dir)
	}
	env := readFile(t, filepath.Join(readers[0], "env"))
	for _, want := range []string{"DISTLOCK_KEY=rw\n", "DISTLOCK_MODE=shared\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("a shared command's environment lacks %q", want)
		}
	}
	if strings.Contains(env, "DISTLOCK_FENCE=") {
		t.Error("a shared command got DISTLOCK_FENCE")
	}
	if s.held(t, "rw") {
		t.Error("run --shared took the lock KEY, not the read-write lock KEY")
	}

	const wait = 300 * time.Millisecond
	r := runDistlock(t, bin, s.env, "run", "--key", "rw", "--exclusive", "--wait", wait.String(), "--", "false")
	if r.code != ExitNotAcquired {
		t.Fatalf("--exclusive while two shared runs hold: exit %d, want %d; stderr: %s", r.code, ExitNotAcquired, r.stderr)
	}
	wantOneLine(t, r, `"rw" is held shared by`, "reader-0", "reader-1", "the command was not run")
	if r.elapsed < wait {
		t.Errorf("--exclusive --wait %v: gave up after %v", wait, r.elapsed)
	}

	writer := t.TempDir()
	w := startDistlock(t, bin, s.env, "", "run", "--key", "rw", "--exclusive", "--wait", "30s", "--owner", "writer",
		"--", "sh", "-c", waitingJob(writer, "env > "+filepath.Join(writer, "env")))
	if r, ended := w.wait(500 * time.Millisecond); ended || fileExists(filepath.Join(writer, "started")) {
		t.Fatalf("--exclusive --wait ran while shared runs held: exit %d, %s", r.code, r.stderr)
	}
	for i, dir := range readers {
		letGo(t, dir)
		if r := procs[i].mustWait(t, processTimeout); r.code != 0 || r.stderr != "" {
			t.Fatalf("shared run %d exited %d, stderr %q; want 0 and nothing", i, r.code, r.stderr)
		}
	}
	awaitStart(t, writer)
	env = readFile(t, filepath.Join(writer, "env"))
	for _, want := range []string{"DISTLOCK_KEY=rw\n", "DISTLOCK_MODE=exclusive\n", "DISTLOCK_FENCE="} {
		if !strings.Contains(env, want) {
			t.Errorf("the exclusive command's environment lacks %q", want)
		}
	}

	r = runDistlock(t, bin, s.env, "run", "--key", "rw", "--shared", "--", "false")
	if r.code != ExitNotAcquired {
		t.Fatalf("--shared while an exclusive run holds: exit %d, want %d; stderr: %s", r.code, ExitNotAcquired, r.stderr)
	}
	wantOneLine(t, r, `"rw" is held exclusively by writer (fence `, "the command was not run")
	ran := filepath.Join(t.TempDir(), "ran")
	waiter := startDistlock(t, bin, s.env, "", "run", "--key", "rw", "--shared", "--wait", "30s", "--", "touch", ran)
	if r, ended := waiter.wait(500 * time.Millisecond); ended || fileExists(ran) {
		t.Fatalf("--shared --wait ran while an exclusive run held: exit %d, %s", r.code, r.stderr)
	}
	letGo(t, writer)
	if r := w.mustWait(t, processTimeout); r.code != 0 || r.stderr != "" {
		t.Fatalf("the exclusive run exited %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	if r := waiter.mustWait(t, processTimeout); r.code != 0 || r.stderr != "" || !fileExists(ran) {
		t.Fatalf("the shared waiter exited %d, stderr %q, ran %v; want 0, nothing and ran", r.code, r.stderr, fileExists(ran))
	}
	// Every hold was released: an exclusive run gets KEY at once.
	if r := runDistlock(t, bin, s.env, "run", "--key", "rw", "--exclusive", "--", "true"); r.code != 0 {
		t.Fatalf("--exclusive after every run ended: exit %d; stderr: %s", r.code, r.stderr)
	}
	if s.held(t, "rw") {
		t.Error("a run of the read-write lock KEY left the lock KEY held")
	}
}

// run --shared or --exclusive over a store that keeps no read-write locks
// (Redlock over three real redis-servers) exits 1 saying so, and the
// command does not run.
func TestRunSharedUnsupported(t *testing.T) {
	bin := buildDistlock(t)
	var nodes []string
	for range 3 {
		nodes = append(nodes, testserver.Redis(t).Addr())
	}
	env := []string{"DISTLOCK_BACKEND=redlock://" + strings.Join(nodes, ",")}
	for _, mode := range []string{"--shared", "--exclusive"} {
		ran := filepath.Join(t.TempDir(), "ran")
		r := runDistlock(t, bin, env, "run", "--key", "rw", mode, "--", "touch", ran)
		if r.code != ExitError {
			t.Fatalf("%s: exit %d, want %d; stderr: %s", mode, r.code, ExitError, r.stderr)
		}
		wantOneLine(t, r, "run: "+mode+": ", "redlock keeps no read-write locks")
		if fileExists(ran) {
			t.Errorf("%s: the command ran without the read-write lock", mode)
		}
	}
}

// --wait forever (or inf) waits for a held key as long as it takes, as
// flock and etcdctl lock do by default.
func testRunWaitForever(t *testing.T, bin string, s store) {
	for _, word := range []string{"forever", "inf"} {
		dir := t.TempDir()
		holder := startDistlock(t, bin, s.env, "", "run", "--key", "forever", "--", "sh", "-c", waitingJob(dir, ""))
		awaitStart(t, dir)
		waiter := startDistlock(t, bin, s.env, "", "run", "--key", "forever", "--wait", word, "--", "true")
		if r, ended := waiter.wait(time.Second); ended {
			t.Fatalf("--wait %s on a held key ended at once: exit %d, %s", word, r.code, r.stderr)
		}
		letGo(t, dir)
		holder.mustWait(t, processTimeout)
		if r := waiter.mustWait(t, processTimeout); r.code != ExitOK {
			t.Errorf("--wait %s: exit %d once the key was free: %s", word, r.code, r.stderr)
		}
	}
}

// A distlock killed with SIGKILL takes its command with it (Linux), since
// nothing renews the lock any more.
func testRunDistlockKilled(t *testing.T, bin string, s store) {
	dir := t.TempDir()
	p := startDistlock(t, bin, s.env, "", "run", "--key", "killed", "--", "sh", "-c", waitingJob(dir, ""))
	awaitStart(t, dir)
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, filepath.Join(dir, "started"))))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.mustWait(t, processTimeout)
	if !waitFor(10*time.Second, func() bool { return !alive(pid) }) {
		t.Fatalf("the command (pid %d) still runs 10s after distlock was killed", pid)
	}
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// A store that cannot be reached is ExitUnavailable, and the command does
// not run.
func testRunUnreachable(t *testing.T, bin string) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	url := fmt.Sprintf("redis://127.0.0.1:%d?dial_timeout=300ms", testserver.FreePort(t))
	r := runDistlock(t, bin, nil, "run", "--backend", url, "--key", "k", "--", "touch", ran)
	if r.code != ExitUnavailable {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, ExitUnavailable, r.stderr)
	}
	wantOneLine(t, r, "connection refused")
	if fileExists(ran) {
		t.Error("the command ran without the lock")
	}
}

// A store that stops answering while the command runs: the lock is lost
// when its lease runs out unconfirmed, the command is stopped, and distlock
// says it releases the lock, tries within lostReleaseBound and exits, rather
// than wait for the mute store for the library's whole ReleaseBudget.
func TestRunStoreStopsAnswering(t *testing.T) {
	bin := buildDistlock(t)
	srv := testserver.Redis(t)
	env := []string{"DISTLOCK_BACKEND=redis://" + srv.Addr()}
	const lease = 3 * time.Second
	dir := t.TempDir()
	trapped := filepath.Join(dir, "trapped")
	setup := fmt.Sprintf(`trap 'echo TERM > %q; exit 0' TERM`, trapped)
	p := startDistlock(t, bin, env, "", "run", "--key", "mute", "--lease", lease.String(), "--", "sh", "-c", waitingJob(dir, setup))
	awaitStart(t, dir)
	srv.Pause()
	paused := time.Now()
	resumed := false
	defer func() { // before the cleanups, so that nothing waits on a stopped store
		if !resumed {
			srv.Resume()
		}
	}()
	if !waitFor(lease+10*time.Second, func() bool { return fileExists(trapped) }) {
		t.Fatalf("the command was not stopped within %v of the store's pause (lease %v)", lease+10*time.Second, lease)
	}
	stopped := time.Now()
	r := p.mustWait(t, processTimeout)
	took := time.Since(stopped)
	srv.Resume()
	resumed = true
	t.Logf("store paused → command stopped in %v → distlock exited %v later (bound %v)", stopped.Sub(paused), took, lostReleaseBound)

	if r.code != ExitLockLost {
		t.Errorf("exit %d, want %d", r.code, ExitLockLost)
	}
	if limit := lostReleaseBound + time.Second; took > limit {
		t.Errorf("distlock exited %v after the command was stopped, want at most %v (the release's bound %v and 1s)", took, limit, lostReleaseBound)
	}
	lines := r.stderrLines()
	if len(lines) != 2 {
		t.Fatalf("stderr has %d lines, want 2 (the release's wait, then the loss):\n%s", len(lines), r.stderr)
	}
	if want := fmt.Sprintf(`distlock: run: lock "mute" was lost; releasing it (up to %v) ...`, lostReleaseBound); lines[0] != want {
		t.Errorf("stderr's first line is %q, want %q", lines[0], want)
	}
	if want := `lock "mute" lost while the command ran: store unreachable (unreachable)`; !strings.Contains(lines[1], want) {
		t.Errorf("stderr's last line %q does not say %q", lines[1], want)
	}
}

// A store that stops answering for a moment while run waits for a held key
// does not end the wait (consul lock needs -monitor-retry for that): the
// library retries store failures within --wait, and run takes the key once
// the store answers again and the holder lets go.
func TestRunWaitRetriesStoreErrors(t *testing.T) {
	bin := buildDistlock(t)
	srv := testserver.Redis(t)
	env := []string{"DISTLOCK_BACKEND=redis://" + srv.Addr()}
	// The waiter's requests time out after 200ms, so the pause below fails
	// several of them.
	waiterEnv := []string{"DISTLOCK_BACKEND=redis://" + srv.Addr() + "?request_timeout=200ms"}
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	holder := startDistlock(t, bin, env, "", "run", "--key", "flaky", "--", "sh", "-c", waitingJob(dir, ""))
	awaitStart(t, dir)
	waiter := startDistlock(t, bin, waiterEnv, "", "run", "--key", "flaky", "--wait", "30s", "--", "touch", ran)
	if r, ended := waiter.wait(time.Second); ended {
		t.Fatalf("run --wait 30s on a held key ended at once: exit %d, %s", r.code, r.stderr)
	}
	const pause = 1500 * time.Millisecond
	srv.Pause()
	r, ended := waiter.wait(pause)
	srv.Resume()
	if ended {
		t.Fatalf("run --wait gave up while the store was paused for %v: exit %d, %s", pause, r.code, r.stderr)
	}
	if fileExists(ran) {
		t.Fatal("the command ran while the key was held")
	}
	letGo(t, dir)
	if r := holder.mustWait(t, processTimeout); r.code != 0 {
		t.Fatalf("the holder exited %d: %s", r.code, r.stderr)
	}
	r = waiter.mustWait(t, processTimeout)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("the waiter exited %d, stderr %q; want 0 and nothing once the key was free", r.code, r.stderr)
	}
	if !fileExists(ran) {
		t.Error("the waiter's command did not run")
	}
	t.Logf("store paused %v during the wait; the waiter took the key %v after it started", pause, r.elapsed)
}

// TestWaitOutlastedByStoreFailure: a wait of run or hold that runs out
// while the store fails exits 69 naming the store's last error, rather than
// 75 saying that another owner holds the key, which nobody could tell.
func TestWaitOutlastedByStoreFailure(t *testing.T) {
	bin := buildDistlock(t)
	srv := testserver.Redis(t)
	env := []string{"DISTLOCK_BACKEND=redis://" + srv.Addr()}
	waiterEnv := []string{"DISTLOCK_BACKEND=redis://" + srv.Addr() + "?request_timeout=200ms"}
	for _, tc := range []struct {
		op   string
		args []string
		says string
	}{
		{"run", []string{"run", "--key", "failing", "--wait", "2s", "--", "true"}, "; the command was not run"},
		{"hold", []string{"hold", "failing", "--wait", "2s"}, ""},
	} {
		t.Run(tc.op, func(t *testing.T) {
			dir := t.TempDir()
			holder := startDistlock(t, bin, env, "", "run", "--key", "failing", "--", "sh", "-c", waitingJob(dir, ""))
			awaitStart(t, dir)
			waiter := startDistlock(t, bin, waiterEnv, "", tc.args...)
			// The waiter joins the key's queue (on a loaded machine its start
			// and connection can take longer than any fixed pause), and only
			// then does the store stop answering.
			st := store{addr: srv.Addr()}
			queued := waitFor(20*time.Second, func() bool {
				if _, ended := waiter.wait(0); ended {
					return true
				}
				return st.redis(t, "ZCARD", lockName("failing")+":q") == "1"
			})
			if r, ended := waiter.wait(0); ended || !queued {
				t.Fatalf("%s --wait 2s on a held key did not wait in its queue: exited %v, exit %d, %s", tc.op, ended, r.code, r.stderr)
			}
			srv.Pause()
			r := waiter.mustWait(t, processTimeout)
			srv.Resume()
			letGo(t, dir)
			holder.mustWait(t, processTimeout)
			if r.code != ExitUnavailable {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, ExitUnavailable, r.stderr)
			}
			wantOneLine(t, r, tc.op+`: "failing" was not acquired within --wait 2s: the store failed: `, tc.says)
			if strings.Contains(r.stderr, "held by") {
				t.Errorf("stderr %q says who holds the key, which the failing store could not tell", r.stderr)
			}
		})
	}
}

// Bad input gives one clear line and a non-zero exit, and touches no store:
// the store sees no connection but the test's own probes.
func TestRunBadInput(t *testing.T) {
	bin := buildDistlock(t)
	s := newStore(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"unknown scheme", []string{"run", "--backend", "nope://x", "--key", "k", "--", "true"}, ExitUsage, "forgotten import"},
		{"malformed duration", []string{"run", "--key", "k", "--lease", "3x", "--", "true"}, ExitUsage, `invalid argument "3x" for "--lease"`},
		{"lease too short", []string{"run", "--key", "k", "--lease", "1ms", "--", "true"}, ExitUsage, "--lease 1ms: want at least 10ms"},
		{"negative wait", []string{"run", "--key", "k", "--wait", "-1s", "--", "true"}, ExitUsage, "cannot be negative"},
		{"wait neither a duration nor forever", []string{"run", "--key", "k", "--wait", "someday", "--", "true"}, ExitUsage, `invalid argument "someday" for "--wait"`},
		{"at-least over max-hold", []string{"run", "--key", "k", "--at-least", "1m", "--max-hold", "30s", "--", "true"}, ExitUsage, "longer than --max-hold"},
		{"conflict code over 255", []string{"run", "--key", "k", "--conflict-exit-code", "256", "--", "true"}, ExitUsage, "--conflict-exit-code 256: want 0 to 255"},
		{"negative conflict code", []string{"run", "--key", "k", "--conflict-exit-code", "-1", "--", "true"}, ExitUsage, "--conflict-exit-code -1: want 0 to 255"},
		{"conflict code not a number", []string{"run", "--key", "k", "--conflict-exit-code", "busy", "--", "true"}, ExitUsage, `invalid argument "busy" for "--conflict-exit-code"`},
		{"conflict code with skip-ok", []string{"run", "--key", "k", "--conflict-exit-code", "3", "--skip-ok", "--", "true"}, ExitUsage, "--conflict-exit-code and --skip-ok"},
		{"-c and a command", []string{"run", "--key", "k", "-c", "true", "--", "true"}, ExitUsage, "give -c or a command after --, not both"},
		{"-c empty", []string{"run", "--key", "k", "-c", ""}, ExitUsage, "-c: empty shell command"},
		{"-c and words", []string{"run", "--key", "k", "-c", "echo", "hi"}, ExitUsage, `unexpected "hi"`},
		{"no permits", []string{"run", "--key", "k", "-n", "0", "--", "true"}, ExitUsage, "-n 0: want at least 1 permit"},
		{"negative permits", []string{"run", "--key", "k", "-n", "-2", "--", "true"}, ExitUsage, "-n -2: want at least 1 permit"},
		{"permits not a number", []string{"run", "--key", "k", "-n", "many", "--", "true"}, ExitUsage, `invalid argument "many" for "-n, --permits"`},
		{"shared and exclusive", []string{"run", "--key", "k", "--shared", "--exclusive", "--", "true"}, ExitUsage, "--shared and --exclusive: give one"},
		{"shared with permits", []string{"run", "--key", "k", "--shared", "-n", "2", "--", "true"}, ExitUsage, "-n and --shared: give one"},
		{"exclusive with permits", []string{"run", "--key", "k", "-n", "2", "--exclusive", "--", "true"}, ExitUsage, "-n and --exclusive: give one"},
		{"missing --", []string{"run", "--key", "k", "echo", "hi"}, ExitUsage, "put -- before the command"},
		{"no command", []string{"run", "--key", "k", "--"}, ExitUsage, "no command"},
		{"no key", []string{"run", "--", "true"}, ExitUsage, "--key is required"},
		{"bad key", []string{"run", "--key", "a\x01b", "--", "true"}, ExitUsage, "invalid key"},
		{"bad output", []string{"run", "-o", "yaml", "--key", "k", "--", "true"}, ExitUsage, `-o "yaml": want text or json`},
		{"json output", []string{"run", "-o", "json", "--key", "k", "--", "true"}, ExitUsage, "run: -o json: run prints no report of its own"},
		{"no such command", []string{"run", "--key", "k", "--", "/nonexistent/job"}, exitNotFound, "/nonexistent/job"},
		{"unknown command", []string{"frobnicate"}, ExitUsage, `unknown command "frobnicate"`},
		{"unknown flag", []string{"run", "--lease-time", "1s", "--key", "k", "--", "true"}, ExitUsage, "unknown flag: --lease-time"},
		{"status without key", []string{"status"}, ExitUsage, "status takes one KEY, got 0"},
		{"list two prefixes", []string{"list", "a", "b"}, ExitUsage, "at most one PREFIX"},
		{"release without --force", []string{"release", "k"}, ExitUsage, "ask the holder with distlock release --request KEY"},
		{"release both ways", []string{"release", "--request", "--force", "k", "--reason", "x"}, ExitUsage, "give one"},
		{"request without reason", []string{"release", "--request", "k"}, ExitUsage, "--reason is required"},
		{"request reason too long", []string{"release", "--request", "k", "--reason", strings.Repeat("x", 300)}, ExitUsage, "--reason is too long"},
		{"unknown request signal", []string{"run", "--key", "k", "--on-release-request", "BOGUS", "--", "true"}, ExitUsage, `--on-release-request "BOGUS"`},
		{"request signal KILL", []string{"run", "--key", "k", "--on-release-request", "KILL", "--", "true"}, ExitUsage, "a signal the command can handle"},
		{"release without reason", []string{"release", "--force", "--yes", "k"}, ExitUsage, "--reason is required"},
		{"release with no terminal", []string{"release", "--force", "k", "--reason", "stuck"}, ExitUsage, "stdin is not a terminal"},
		{"once-per not a period", []string{"run", "--key", "k", "--once-per", "soon", "--", "true"}, ExitUsage, `invalid argument "soon" for "--once-per"`},
		{"once-per @every", []string{"run", "--key", "k", "--once-per", "@every 1h", "--", "true"}, ExitUsage, "give the period itself"},
		{"once-per under a second", []string{"run", "--key", "k", "--once-per", "500ms", "--", "true"}, ExitUsage, "whole seconds"},
		{"once-per with permits", []string{"run", "--key", "k", "--once-per", "1h", "-n", "2", "--", "true"}, ExitUsage, "not -n, --shared or --exclusive"},
		{"records without once-per", []string{"run", "--key", "k", "--records", "redis://127.0.0.1:1", "--", "true"}, ExitUsage, "go with --once-per"},
		{"retry-failed without once-per", []string{"run", "--key", "k", "--retry-failed", "--", "true"}, ExitUsage, "go with --once-per"},
		{"records in a store without records", []string{"run", "--key", "k", "--once-per", "1h", "--records", "etcd://127.0.0.1:1", "--", "true"}, ExitUsage, "no record store"},
		{"once-per key too long", []string{"run", "--key", strings.Repeat("k", 500), "--once-per", "1h", "--", "true"}, ExitUsage, "--key of 500 bytes: want at most 486"},
		{"records URL invalid", []string{"run", "--key", "k", "--once-per", "1h", "--records", "redis://127.0.0.1:1?request_timeout=soon", "--", "true"}, ExitUsage, "request_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := connections(t, s)
			r := runDistlock(t, bin, s.env, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d", r.code, tc.code)
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

// connections returns how many connections the store has accepted, the
// probe's own included.
func connections(t *testing.T, s store) int {
	t.Helper()
	for _, line := range strings.Split(s.redis(t, "INFO", "stats"), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO stats has no total_connections_received")
	return 0
}
