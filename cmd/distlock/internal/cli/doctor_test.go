package cli

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
)

// runMain runs the command line in-process and returns its exit code,
// standard output and standard error.
func runMain(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Main(args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// oneLine asserts that stderr is one line containing want.
func oneLine(t *testing.T, stderr, want string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, want) {
		t.Errorf("stderr %q: want one line containing %q", stderr, want)
	}
}

func TestDoctorDangerExit(t *testing.T) {
	s := testserver.Redis(t, "--maxmemory", "10mb", "--maxmemory-policy", "volatile-lru")
	code, out, errOut := runMain("doctor", "redis://"+s.Addr())
	if code != ExitDanger {
		t.Fatalf("exit %d, want %d (ExitDanger); stderr %q", code, ExitDanger, errOut)
	}
	oneLine(t, errOut, "2 danger finding(s)")
	// Text output: a summary, then the groups, most urgent first.
	danger, info := strings.Index(out, "\nDANGER\n"), strings.Index(out, "\nINFO\n")
	if !strings.HasPrefix(out, "redis://"+s.Addr()+" (redis): 2 danger, 0 warning, 2 info\n") || danger < 0 || info < danger {
		t.Fatalf("text output:\n%s", out)
	}
	for _, w := range []string{"  maxmemory-policy [" + s.Addr() + "]", "    seen:        maxmemory-policy volatile-lru", "    consequence: ", "    fix:         CONFIG SET maxmemory-policy noeviction"} {
		if !strings.Contains(out, w) {
			t.Errorf("text output lacks %q:\n%s", w, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if len(line) > doctorWidth && strings.Contains(line, " ") {
			t.Errorf("line of %d columns: %q", len(line), line)
		}
	}
}

func TestDoctorCleanJSON(t *testing.T) {
	s := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction")
	t.Setenv("DISTLOCK_BACKEND", "redis://"+s.Addr())
	code, out, errOut := runMain("doctor", "-o", "json")
	if code != ExitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q, want 0 and nothing", code, errOut)
	}
	var r doctor.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if r.Store != "redis" || len(r.Findings) == 0 || r.Count(doctor.Danger)+r.Count(doctor.Warning) != 0 {
		t.Fatalf("report %+v", r)
	}
	if !strings.Contains(out, `"severity": "info"`) {
		t.Errorf("severity not written by name:\n%s", out)
	}
}

func TestDoctorUnreachable(t *testing.T) {
	addr := net.JoinHostPort(testserver.Host, strconv.Itoa(testserver.FreePort(t)))
	code, out, errOut := runMain("doctor", "--timeout", "1s", "etcd://"+addr)
	if code != ExitUnavailable || out != "" {
		t.Fatalf("exit %d, stdout %q, want %d and nothing", code, out, ExitUnavailable)
	}
	oneLine(t, errOut, "refused")
}

// TestDoctorBadInput: each bad input gives one line on stderr and
// ExitUsage, and nothing connects to the store.
func TestDoctorBadInput(t *testing.T) {
	l, err := net.Listen("tcp", net.JoinHostPort(testserver.Host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			_ = c.Close()
		}
	}()
	a := l.Addr().String()
	t.Setenv("DISTLOCK_BACKEND", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"doctor"}, "no store"},
		{[]string{"doctor", "foo://" + a}, `unknown scheme "foo"`},
		{[]string{"doctor", "%zz"}, "invalid URL escape"},
		{[]string{"doctor", "redis-sentinel://" + a}, "no master name"},
		{[]string{"doctor", "zk://" + a + "?session_timeout=soon"}, "session_timeout"},
		{[]string{"doctor", "redis://" + a, "--lease", "0s"}, "must be positive"},
		{[]string{"doctor", "redis://" + a, "--timeout", "soon"}, "invalid argument"},
		{[]string{"doctor", "redis://" + a, "-o", "yaml"}, `-o "yaml"`},
		{[]string{"doctor", "redis://" + a, "redis://" + a}, "accepts at most 1 arg"},
	} {
		code, out, errOut := runMain(c.args...)
		if code != ExitUsage || out != "" {
			t.Errorf("%v: exit %d, stdout %q, want %d and nothing", c.args, code, out, ExitUsage)
		}
		oneLine(t, errOut, c.want)
	}
	select {
	case <-accepted:
		t.Error("a bad input made a connection")
	default:
	}
}

// doctor takes what Open takes: on a store with nothing to check it says
// why, as an info finding, and exits 0, having sent nothing.
func TestDoctorNothingToCheck(t *testing.T) {
	for _, c := range []struct{ url, why string }{
		{"mem://", "an in-process store has no server"},
		{"distlock://127.0.0.1:1", "check the store URL the service runs with"},
	} {
		code, out, errOut := runMain("doctor", c.url)
		if code != ExitOK || errOut != "" || !strings.Contains(out, "0 danger, 0 warning, 1 info") || !strings.Contains(out, c.why) {
			t.Errorf("doctor %s: exit %d, stdout %q, stderr %q; want %d, one info finding saying %q", c.url, code, out, errOut, ExitOK, c.why)
		}
		code, out, _ = runMain("doctor", c.url, "-o", "json")
		var r doctor.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil || code != ExitOK || len(r.Findings) != 1 || r.Findings[0].Severity != doctor.Info {
			t.Errorf("doctor %s -o json: exit %d, %v, report %+v", c.url, code, err, r)
		}
	}
}

func TestDoctorHelp(t *testing.T) {
	code, out, _ := runMain("doctor", "--help")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, w := range []string{"Exit codes", "Examples:", "--lease", "--timeout", "distlock doctor redis://", "DynamoDB (dynamodb://)",
		"Checked: dynamodb:// etcd://", "Nothing to check (doctor says why): distlock:// distlocks://"} {
		if !strings.Contains(out, w) {
			t.Errorf("help lacks %q:\n%s", w, out)
		}
	}
}
