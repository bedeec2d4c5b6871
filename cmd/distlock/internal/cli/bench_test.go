package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/bench"
	"github.com/distlock/distlock/internal/testserver"
)

// benchCLI runs distlock bench with args and returns its exit code,
// stdout and stderr.
func benchCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Main(append([]string{"bench"}, args...), strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// benchJSON runs distlock bench -o json with args and parses its report.
func benchJSON(t *testing.T, args ...string) bench.Report {
	t.Helper()
	code, out, errOut := benchCLI(append(args, "-o", "json")...)
	if code != ExitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	return rep
}

// checkCounts checks that every side made attempts attempts and that its
// counts add up.
func checkCounts(t *testing.T, rep bench.Report, attempts int64) {
	t.Helper()
	for _, s := range rep.Sides {
		var byKind int64
		for _, n := range s.ErrorsByKind {
			byKind += n
		}
		if s.Attempts != attempts || s.Acquired+s.NotAcquired+s.Errors != s.Attempts || byKind != s.Errors || s.Acquire.Count != s.Acquired {
			t.Errorf("%s: attempts %d (want %d) = acquired %d + not acquired %d + errors %d (%v); %d acquire latencies",
				s.Name, s.Attempts, attempts, s.Acquired, s.NotAcquired, s.Errors, s.ErrorsByKind, s.Acquire.Count)
		}
	}
}

// checkRows checks that the text report has the rows a reader looks for.
func checkRows(t *testing.T, out string, rows ...string) {
	t.Helper()
	for _, row := range rows {
		if !strings.Contains(out, row) {
			t.Errorf("no %q in the report:\n%s", row, out)
		}
	}
}

var textRows = []string{"attempts", "acquired", "not acquired", "errors", "ops/s", "p50", "p90", "p99", "p999",
	"distlock acquire", "distlock wait", "distlock release", "error: store", "error: canceled", "lost after acquire", "release failed"}

func TestBenchMem(t *testing.T) {
	args := []string{"--backend", "mem://", "-n", "2000", "-c", "8", "--clients", "2", "--keys", "4", "--contention", "0.5"}
	rep := benchJSON(t, args...)
	if len(rep.Sides) != 1 || rep.Workers != 8 || rep.Clients != 2 {
		t.Fatalf("report %+v", rep)
	}
	checkCounts(t, rep, 2000)
	code, out, errOut := benchCLI(args...)
	if code != ExitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	checkRows(t, out, append(textRows, "2000")...)
}

func TestBenchRedis(t *testing.T) {
	srv := testserver.Redis(t)
	args := []string{"--backend", "redis://" + srv.Addr(), "-n", "500", "-c", "8", "--keys", "16", "--contention", "0.3"}
	rep := benchJSON(t, args...)
	checkCounts(t, rep, 500)
	if s := rep.Sides[0]; s.Errors != 0 || s.Acquired == 0 {
		t.Errorf("acquired %d, errors %v", s.Acquired, s.ErrorsByKind)
	}
	code, out, _ := benchCLI(args...)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	checkRows(t, out, textRows...)
}

func TestBenchRedisFloor(t *testing.T) {
	srv := testserver.Redis(t)
	args := []string{"--backend", "redis://" + srv.Addr(), "-n", "500", "-c", "4", "--keys", "8", "--floor"}
	rep := benchJSON(t, args...)
	checkCounts(t, rep, 500)
	if len(rep.Sides) != 2 || rep.Sides[1].Name != "floor" || rep.Ratio == nil || rep.Ratio.Throughput <= 0 {
		t.Fatalf("sides %+v, ratio %+v", rep.Sides, rep.Ratio)
	}
	code, out, _ := benchCLI(args...)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	checkRows(t, out, "floor acquire", "floor release", "distlock/floor: throughput")
}

// Bad flags give one line on stderr and ExitUsage, and touch no store: the
// Redis server sees no connection but the test's own.
func TestBenchBadFlags(t *testing.T) {
	srv := testserver.Redis(t)
	redisURL := "redis://" + srv.Addr()
	connections := func() int {
		info, err := testserver.RedisCommand(context.Background(), srv.Addr(), "INFO", "stats")
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatalf("no connection count in %q", info)
		return 0
	}
	for _, args := range [][]string{
		{"--backend", redisURL, "-n", "10", "-c", "-1"},
		{"--backend", redisURL, "-n", "10", "--contention", "1.5"},
		{"--backend", redisURL, "-n", "10", "--duration", "1s"},
		{"--backend", redisURL},
		{"--backend", redisURL, "-n", "10", "--clients", "9"},
		{"--backend", redisURL, "-n", "10", "--lease", "1ms"},
		{"--backend", redisURL, "-n", "10", "--wait", "soon"},
		{"--backend", redisURL, "-n", "10", "-o", "yaml"},
		{"--backend", redisURL, "-n", "10", "extra"},
		{"--backend", "redis-cluster://" + srv.Addr(), "-n", "10", "--floor"},
		{"--backend", "nope://" + srv.Addr(), "-n", "10"},
		{"-n", "10"},
	} {
		before := connections()
		code, out, errOut := benchCLI(args...)
		if code != ExitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "distlock: ") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and one line", args, code, out, errOut, ExitUsage)
		}
		if after := connections(); after != before+1 { // +1: connections' own
			t.Errorf("%q: %d connections to the store", args, after-before-1)
		}
	}
	before := connections() // the check above sees a run that does connect
	if code, _, errOut := benchCLI("--backend", redisURL, "-n", "1"); code != ExitOK || connections() <= before+1 {
		t.Errorf("a good run: exit %d (%s), or no connection seen", code, errOut)
	}
}

// A duration is a deadline for the whole run: when the store stops
// answering mid-run, the attempts in flight end with it, the releases and
// the clients' close within bench.ReleaseGrace each, and the report's
// elapsed time is the run's.
func TestBenchDurationOnAPausedStore(t *testing.T) {
	srv := testserver.Redis(t)
	t.Cleanup(srv.Resume)
	paused := time.AfterFunc(500*time.Millisecond, srv.Pause)
	defer paused.Stop()
	start := time.Now()
	code, out, errOut := benchCLI("--backend", "redis://"+srv.Addr(), "-d", "2s", "-c", "4", "-o", "json")
	took := time.Since(start)
	srv.Resume()
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	if s := rep.Sides[0]; s.ElapsedSeconds > (2*time.Second + bench.ReleaseGrace + 100*time.Millisecond).Seconds() {
		t.Errorf("the report says the run took %.2fs of a 2s run", s.ElapsedSeconds)
	}
	if limit := 2*time.Second + 2*bench.ReleaseGrace + time.Second; took > limit {
		t.Errorf("a 2s run on a store paused after 500ms took %v, want at most %v", took.Round(time.Millisecond), limit)
	}
}

// A counted run on a store that stops answering ends once the store has
// answered nothing for bench.StallLimit, and says so, rather than making
// every attempt left.
func TestBenchCountOnAPausedStore(t *testing.T) {
	srv := testserver.Redis(t)
	t.Cleanup(srv.Resume)
	paused := time.AfterFunc(500*time.Millisecond, srv.Pause)
	defer paused.Stop()
	start := time.Now()
	code, out, errOut := benchCLI("--backend", "redis://"+srv.Addr(), "-n", "200000", "-c", "4")
	took := time.Since(start)
	srv.Resume()
	if code != ExitUnavailable || !strings.Contains(errOut, "answered nothing") {
		t.Errorf("exit %d, stderr %q; want %d and why", code, errOut, ExitUnavailable)
	}
	checkRows(t, out, "attempts")
	if limit := 500*time.Millisecond + bench.StallLimit + bench.ReleaseGrace + 2*time.Second; took > limit {
		t.Errorf("a counted run on a store paused after 500ms took %v, want at most %v", took.Round(time.Millisecond), limit)
	}
}
