package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testRunOncePer: --once-per runs the command once per slot, whichever
// replica comes first; the others, and later runs in the slot, exit 0 with
// one line naming the run that was; a replica that waited for the lock
// while the slot ran finds the record under the lock.
func testRunOncePer(t *testing.T, bin string, s store) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	script := waitingJob(dir, fmt.Sprintf(`echo "$DISTLOCK_SLOT $DISTLOCK_FENCE" >> %q`, runs))
	before := time.Now().UTC()
	procs := make([]*process, 3)
	for i := range procs {
		procs[i] = startDistlock(t, bin, s.env, "", "run", "--key", "daily", "--once-per", "24h", "--wait", "30s", "--", "sh", "-c", script)
	}
	awaitStart(t, dir)
	letGo(t, dir)
	skipped := 0
	for _, p := range procs {
		r := p.mustWait(t, processTimeout)
		if r.code != 0 {
			t.Fatalf("a run exited %d, want 0; stderr: %s", r.code, r.stderr)
		}
		if r.stderr != "" {
			skipped++
			wantOneLine(t, r, `"daily" already ran in slot`, "exit 0", "the command was not run")
		}
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, runs)), "\n")
	if len(lines) != 1 || skipped != 2 {
		t.Fatalf("the command ran %d times and %d runs said they skipped, want 1 and 2:\n%s", len(lines), skipped, readFile(t, runs))
	}
	slot := strings.Fields(lines[0])[0]
	if want := before.Truncate(24 * time.Hour).Format(time.RFC3339); slot != want && slot != time.Now().UTC().Truncate(24*time.Hour).Format(time.RFC3339) {
		t.Errorf("DISTLOCK_SLOT %q, want %q (00:00 UTC today)", slot, want)
	}
	// Later in the slot: silent with --skip-ok.
	if r := runDistlock(t, bin, s.env, "run", "--key", "daily", "--once-per", "24h", "--skip-ok", "--", "touch", filepath.Join(dir, "again")); r.code != 0 || r.stderr != "" || fileExists(filepath.Join(dir, "again")) {
		t.Errorf("a later run with --skip-ok: exit %d, stderr %q, ran %v; want 0, nothing, not run", r.code, r.stderr, fileExists(filepath.Join(dir, "again")))
	}
	// The same key and slot with another command line: not run either, and
	// said so.
	r := runDistlock(t, bin, s.env, "run", "--key", "daily", "--once-per", "24h", "--", "touch", filepath.Join(dir, "other"))
	if r.code != 0 || fileExists(filepath.Join(dir, "other")) {
		t.Errorf("another command in the slot: exit %d, ran %v; want 0, not run", r.code, fileExists(filepath.Join(dir, "other")))
	}
	wantOneLine(t, r, "exit 0, another command line); the command was not run")
	// Another key is another job.
	if r := runDistlock(t, bin, s.env, "run", "--key", "weekly", "--once-per", "168h", "--", "touch", filepath.Join(dir, "weekly")); r.code != 0 || !fileExists(filepath.Join(dir, "weekly")) {
		t.Errorf("another key: exit %d, stderr %q", r.code, r.stderr)
	}
	if s.held(t, "daily") || s.held(t, "weekly") {
		t.Error("a lock is still held after the runs")
	}
}

// testRunOncePerFailed: a failed run is recorded with its exit status, and
// the slot is done; with --retry-failed it is not, and the next run in the
// slot runs the command again.
func testRunOncePerFailed(t *testing.T, bin string, s store) {
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	fail := fmt.Sprintf("echo x >> %q; exit 3", count)
	for i, want := range []struct {
		code int
		says string
	}{{3, ""}, {0, "exit 3"}} {
		r := runDistlock(t, bin, s.env, "run", "--key", "failing", "--once-per", "1h", "-c", fail)
		if r.code != want.code || (want.says != "" && !strings.Contains(r.stderr, want.says)) {
			t.Fatalf("run %d: exit %d, stderr %q; want %d and %q", i, r.code, r.stderr, want.code, want.says)
		}
	}
	if n := strings.Count(readFile(t, count), "x"); n != 1 {
		t.Fatalf("the failing command ran %d times in its slot, want 1", n)
	}
	for i := range 2 {
		r := runDistlock(t, bin, s.env, "run", "--key", "retried", "--once-per", "1h", "--retry-failed", "-c", fail)
		if r.code != 3 {
			t.Fatalf("run %d with --retry-failed: exit %d, want 3; stderr %q", i, r.code, r.stderr)
		}
		if !strings.Contains(r.stderr, "not recorded (--retry-failed)") {
			t.Errorf("run %d with --retry-failed: stderr %q does not say the slot was not recorded", i, r.stderr)
		}
	}
	if n := strings.Count(readFile(t, count), "x"); n != 3 {
		t.Fatalf("with --retry-failed the command ran %d times in all, want 3 (1 + 2)", n)
	}
}

// testRunOncePerRecords: --records keeps the records in another store than
// the locks: two processes over mem://, which share no lock, still run the
// slot once. A cron schedule's slot starts at its last activation.
func testRunOncePerRecords(t *testing.T, bin string, s store) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	env := []string{"DISTLOCK_BACKEND=mem://"}
	records := "redis://" + s.addr
	for range 2 {
		r := runDistlock(t, bin, env, "run", "--key", "minutely", "--once-per", "* * * * *", "--records", records, "-c", fmt.Sprintf(`echo "$DISTLOCK_SLOT" >> %q`, runs))
		if r.code != 0 {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, runs)), "\n")
	if len(lines) > 2 || (len(lines) == 2 && lines[0] == lines[1]) {
		t.Fatalf("two runs in one slot: %q", lines)
	}
	if !strings.HasSuffix(lines[0], ":00Z") {
		t.Errorf("DISTLOCK_SLOT %q of '* * * * *', want a whole minute", lines[0])
	}
	r := runDistlock(t, bin, env, "run", "--key", "nowhere", "--once-per", "1h", "--", "true")
	if r.code != ExitUsage {
		t.Errorf("--once-per over mem:// without --records: exit %d, want %d", r.code, ExitUsage)
	}
	wantOneLine(t, r, "keeps no records: give --records URL")
}

func TestSlotAt(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		spec, now, start, end string
	}{
		{"24h", "2026-12-03T01:59:59Z", "2026-12-03T00:00:00Z", "2026-12-04T00:00:00Z"},
		{"1h", "2026-12-03T02:00:00Z", "2026-12-03T02:00:00Z", "2026-12-03T03:00:00Z"},
		{"168h", "2026-12-03T12:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"}, // a Monday
		{"0 2 * * *", "2026-12-03T01:59:59Z", "2026-12-02T02:00:00Z", "2026-12-03T02:00:00Z"},
		{"0 2 * * *", "2026-12-03T02:00:00Z", "2026-12-03T02:00:00Z", "2026-12-04T02:00:00Z"},
		{"*/15 * * * *", "2026-12-03T02:44:10Z", "2026-12-03T02:30:00Z", "2026-12-03T02:45:00Z"},
		{"@yearly", "2026-12-03T02:44:10Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"0 0 29 2 *", "2026-12-03T00:00:00Z", "2024-02-29T00:00:00Z", "2028-02-29T00:00:00Z"},
	} {
		var s slotSpec
		if err := s.Set(tc.spec); err != nil {
			t.Fatalf("%q: %v", tc.spec, err)
		}
		got, ok := s.slotAt(at(tc.now))
		if !ok || !got.start.Equal(at(tc.start)) || !got.end.Equal(at(tc.end)) {
			t.Errorf("%q at %s: %v to %v (%v), want %s to %s", tc.spec, tc.now, got.start, got.end, ok, tc.start, tc.end)
		}
	}
	for _, bad := range []string{"0s", "1500ms", "-1h", "@every 1h", "61 * * * *", "soon"} {
		var s slotSpec
		if err := s.Set(bad); err == nil {
			t.Errorf("--once-per %q accepted", bad)
		}
	}
}
