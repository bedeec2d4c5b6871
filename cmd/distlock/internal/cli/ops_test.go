package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

// status, list and release --force against a lock held by a distlock run
// in another process, in text and JSON.
func TestOps(t *testing.T) {
	bin := buildDistlock(t)
	s := newStore(t)
	dir := t.TempDir()
	fenceFile := filepath.Join(dir, "fence")
	holder := startDistlock(t, bin, s.env, "", "run", "--key", "ops/a", "--owner", "alice", "--business-id", "order-42",
		"--lease", "2s", "--", "sh", "-c", waitingJob(dir, "echo $DISTLOCK_FENCE > "+fenceFile+"; trap 'exit 0' TERM"))
	awaitStart(t, dir)
	fence, err := strconv.ParseUint(strings.TrimSpace(readFile(t, fenceFile)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ops := func(t *testing.T, args ...string) result {
		t.Helper()
		r := runDistlock(t, bin, s.env, args...)
		if r.code != 0 {
			t.Fatalf("%q: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}

	t.Run("StatusText", func(t *testing.T) {
		out := ops(t, "status", "ops/a").stdout
		for _, re := range []string{`(?m)^key: +ops/a$`, `(?m)^held: +yes$`, `(?m)^owner: +alice$`, `(?m)^business id: +order-42$`,
			`(?m)^fence: +` + strconv.FormatUint(fence, 10) + `$`, `(?m)^lease left: +[0-9.]+m?s$`} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("status does not match %s:\n%s", re, out)
			}
		}
	})
	t.Run("StatusJSON", func(t *testing.T) {
		var v lockView
		decode(t, ops(t, "status", "ops/a", "-o", "json").stdout, &v)
		if !v.Held || v.Key != "ops/a" || v.Owner != "alice" || v.BusinessID != "order-42" || v.Fence != fence {
			t.Errorf("status -o json: %+v, want ops/a held by alice for order-42 with fence %d", v, fence)
		}
		if v.LeaseLeftMS <= 0 || v.LeaseLeftMS > 2000 {
			t.Errorf("lease_left_ms %d, want in (0, 2000]", v.LeaseLeftMS)
		}
	})
	t.Run("StatusFree", func(t *testing.T) {
		if out := ops(t, "status", "ops/free").stdout; out != "key:  ops/free\nheld: no\n" {
			t.Errorf("status of a free key:\n%s", out)
		}
		var v lockView
		out := ops(t, "status", "ops/free", "-o", "json").stdout
		decode(t, out, &v)
		if v.Held || v.Key != "ops/free" {
			t.Errorf("status -o json of a free key: %+v", v)
		}
		if strings.Contains(out, `"fence"`) { // a field without a value is left out
			t.Errorf("status -o json of a key never granted: %s, want no fence", out)
		}
	})
	t.Run("StatusExitStatus", func(t *testing.T) { // a script needs no jq to ask
		for key, want := range map[string]int{"ops/a": ExitOK, "ops/free": 3} {
			for _, args := range [][]string{{"status", "--exit-status", key}, {"status", "--exit-status", key, "-o", "json"}} {
				if r := runDistlock(t, bin, s.env, args...); r.code != want || r.stdout == "" || r.stderr != "" {
					t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and the status", args, r.code, r.stdout, r.stderr, want)
				}
			}
		}
	})
	t.Run("ListText", func(t *testing.T) {
		out := ops(t, "list", "ops/").stdout
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "KEY OWNER BUSINESS ID FENCE LEASE LEFT" {
			t.Fatalf("list: want a header and one row:\n%s", out)
		}
		row := strings.Fields(lines[1])
		if len(row) != 5 || row[0] != "ops/a" || row[1] != "alice" || row[2] != "order-42" || row[3] != strconv.FormatUint(fence, 10) {
			t.Errorf("list row %q, want ops/a alice order-42 %d and the lease left", lines[1], fence)
		}
		if out := ops(t, "list", "nothing/").stdout; out != "no locks held under \"nothing/\"\n" {
			t.Errorf("list of an unused prefix: %q", out)
		}
	})
	t.Run("ListJSON", func(t *testing.T) {
		var vs []lockView
		decode(t, ops(t, "list", "-o", "json").stdout, &vs)
		if len(vs) != 1 || vs[0].Key != "ops/a" || vs[0].Owner != "alice" || vs[0].Fence != fence {
			t.Errorf("list -o json: %+v, want ops/a held by alice", vs)
		}
		if out := ops(t, "list", "nothing/", "-o", "json").stdout; out != "[]\n" {
			t.Errorf("list -o json of an unused prefix: %q, want []", out)
		}
	})
	t.Run("ForceRelease", func(t *testing.T) {
		var res releaseResult
		decode(t, ops(t, "release", "--force", "ops/a", "--reason", "job hung", "--yes", "-o", "json").stdout, &res)
		if res.Released.Owner != "alice" || res.Released.Fence != fence || res.Reason != "job hung" || res.By != operator() {
			t.Errorf("release -o json: %+v, want alice's hold with fence %d ended by %s for \"job hung\"", res, fence, operator())
		}
		if s.held(t, "ops/a") {
			t.Error("the key is still held after release --force")
		}
		// The holder is told at once by the release's notice and stops its
		// command.
		r := holder.mustWait(t, processTimeout)
		if r.code != ExitLockLost {
			t.Fatalf("the holder exited %d, want %d: %s", r.code, ExitLockLost, r.stderr)
		}
		wantOneLine(t, r, "(deleted)")
	})
	t.Run("ForceReleaseText", func(t *testing.T) {
		dir := t.TempDir()
		p := startDistlock(t, bin, s.env, "", "run", "--key", "ops/b", "--owner", "bob", "--lease", "1s", "--", "sh", "-c", waitingJob(dir, "trap 'exit 0' TERM"))
		awaitStart(t, dir)
		out := ops(t, "release", "--force", "--yes", "ops/b", "--reason", "INC-7").stdout
		want := regexp.MustCompile(`^released "ops/b" held by bob \(business id -, fence [0-9]+, lease left [0-9.]+m?s\); by ` +
			regexp.QuoteMeta(operator()) + `: INC-7\n$`)
		if !want.MatchString(out) {
			t.Errorf("release --force printed %q", out)
		}
		p.mustWait(t, processTimeout)
	})
	t.Run("ReleaseRequest", func(t *testing.T) {
		// The holder is told at once, passes it on to its command as
		// SIGTERM, and exits with the command's code: the lock was not lost.
		dir := t.TempDir()
		p := startDistlock(t, bin, s.env, "", "run", "--key", "ops/r", "--owner", "carol", "--on-release-request", "TERM",
			"--", "sh", "-c", waitingJob(dir, "trap 'exit 0' TERM"))
		awaitStart(t, dir)
		var res requestResult
		decode(t, ops(t, "release", "--request", "ops/r", "--reason", "deploy at 02:00", "-o", "json").stdout, &res)
		if res.Asked.Owner != "carol" || !res.Asked.Held || res.Reason != "deploy at 02:00" || res.By != operator() {
			t.Errorf("release --request -o json: %+v, want carol's hold asked by %s", res, operator())
		}
		r := p.mustWait(t, processTimeout)
		if r.code != 0 {
			t.Fatalf("the holder exited %d, want the command's 0: %s", r.code, r.stderr)
		}
		wantOneLine(t, r, `a release of lock "ops/r" was requested: `+operator()+`: deploy at 02:00; the command's process group gets SIGTERM`)
		if s.held(t, "ops/r") {
			t.Error("the key is still held after the command ended")
		}
		free := runDistlock(t, bin, s.env, "release", "--request", "ops/r", "--reason", "again")
		if free.code != ExitError {
			t.Fatalf("release --request of a free key: exit %d, want %d", free.code, ExitError)
		}
		wantOneLine(t, free, `"ops/r" is not held; nobody was asked`)
	})
	t.Run("DeletedUnnoticed", func(t *testing.T) {
		// Deleted between two renewals behind distlock's back, a run whose
		// command ends first learns it at release: the command's exit
		// code, and a warning. A forced release would be told at once, and
		// so would the deletion while the backend tracks its held keys:
		// this run does not, so that the deletion goes unnoticed until the
		// release, however slowly the command sees its go.
		untracked := []string{"DISTLOCK_BACKEND=redis://" + s.addr + "?track_loss=false"}
		dir := t.TempDir()
		p := startDistlock(t, bin, untracked, "", "run", "--key", "ops/c", "--", "sh", "-c", waitingJob(dir, ""))
		awaitStart(t, dir)
		s.redis(t, "DEL", lockName("ops/c"))
		letGo(t, dir)
		r := p.mustWait(t, processTimeout)
		if r.code != 0 {
			t.Errorf("exit %d, want the command's 0", r.code)
		}
		wantOneLine(t, r, `warning: lock "ops/c" was no longer held when released`)
	})
	t.Run("ForceReleaseFree", func(t *testing.T) {
		r := runDistlock(t, bin, s.env, "release", "--force", "--yes", "ops/free", "--reason", "x")
		if r.code != ExitError {
			t.Fatalf("exit %d, want %d", r.code, ExitError)
		}
		wantOneLine(t, r, `"ops/free" is not held; nothing was released`)
	})
}

// decode unmarshals JSON output into v.
func decode(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
}

// PostgreSQL advisory locks cannot be force-released without ending the
// holder's session, which the URL must allow: release --force says so.
func TestForceReleaseUnsupportedByPostgres(t *testing.T) {
	bin := buildDistlock(t)
	pg := testserver.Postgres(t)
	env := []string{"DISTLOCK_BACKEND=" + testserver.PostgresDSN(pg)}
	r := runDistlock(t, bin, env, "release", "--force", "--yes", "job", "--reason", "stuck")
	if r.code != ExitError {
		t.Fatalf("exit %d, want %d: %s", r.code, ExitError, r.stderr)
	}
	wantOneLine(t, r, "this store cannot free a lock it did not grant", "unsupported", "terminate_on_force_release=true")
}

// limitedBackend is a store that can neither list nor force-release.
type limitedBackend struct{ driver.Backend }

func init() {
	distlock.Register("limited-mem", func(context.Context, *url.URL) (driver.Backend, error) {
		return limitedBackend{memlock.New()}, nil
	})
	doctor.None("limited-mem", "a test store: nothing outside the process")
	floor.None("limited-mem", "a test store, whose operations these tests limit")
	migrate.None("limited-mem", "a test store in the process")
}

// A backend without listing or force release: a clear line and ExitError.
func TestUnsupportedOperations(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"list"}, "list: this store cannot enumerate its locks: "},
		{[]string{"release", "--force", "--yes", "k", "--reason", "r"}, "release --force: this store cannot free a lock it did not grant: "},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(append(tc.args, "--backend", "limited-mem://"), strings.NewReader(""), &stdout, &stderr)
		if code != ExitError || !strings.Contains(stderr.String(), tc.says) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want %d and one line saying %q", tc.args, code, stderr.String(), ExitError, tc.says)
		}
	}
}

// Confirmation takes y or yes, any case; anything else, or nothing, is no.
func TestAnsweredYes(t *testing.T) {
	for in, want := range map[string]bool{"y\n": true, "YES\n": true, " yes \n": true, "y": true, "n\n": false, "\n": false, "": false, "yep\n": false} {
		if got := answeredYes(context.Background(), strings.NewReader(in)); got != want {
			t.Errorf("answeredYes(%q) = %v, want %v", in, got, want)
		}
	}
}

// A signal to a run waiting for the lock ends the wait with 128+N.
func TestRunInterruptedWhileWaiting(t *testing.T) {
	bin := buildDistlock(t)
	s := newStore(t)
	dir := t.TempDir()
	holder := startDistlock(t, bin, s.env, "", "run", "--key", "wait", "--", "sh", "-c", waitingJob(dir, ""))
	awaitStart(t, dir)
	defer func() {
		letGo(t, dir)
		holder.mustWait(t, processTimeout)
	}()
	queued := func() string { return s.redis(t, "ZCARD", lockName("wait")+":q") }
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
	}{{syscall.SIGINT, "SIGINT"}, {syscall.SIGHUP, "SIGHUP"}} {
		waiter := startDistlock(t, bin, s.env, "", "run", "--key", "wait", "--wait", "1m", "--", "true")
		// A waiter joins the key's queue of waiters.
		if !waitFor(20*time.Second, func() bool { return queued() == "1" }) {
			t.Fatal("the waiter did not start waiting within 20s")
		}
		if err := waiter.cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		r := waiter.mustWait(t, processTimeout)
		if r.code != 128+int(tc.sig) {
			t.Errorf("%s: exit %d, want %d", tc.name, r.code, 128+int(tc.sig))
		}
		wantOneLine(t, r, "interrupted by "+tc.name+" while waiting for the lock")
		if !waitFor(20*time.Second, func() bool { return queued() == "0" }) {
			t.Fatal("the waiter was still queued 20s after it ended")
		}
	}
}
