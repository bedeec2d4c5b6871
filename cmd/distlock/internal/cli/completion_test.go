package cli

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// The bounds docs/cli.md promises for key candidates.
const (
	wantTimeout = 2 * time.Second
	wantLimit   = 200
)

// completion is what cobra's hidden __complete command printed: the
// candidates, the directive and stderr.
type completion struct {
	values    []string
	directive cobra.ShellCompDirective
	stderr    string
}

// complete runs distlock __complete args in-process, as a shell's
// completion script does, and parses its output.
func complete(t *testing.T, args ...string) completion {
	t.Helper()
	code, stdout, stderr := runMain(append([]string{cobra.ShellCompRequestCmd}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %q: exit %d; stderr %q", args, code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, ":") {
		t.Fatalf("__complete %q: output does not end with a directive:\n%s", args, stdout)
	}
	d, err := strconv.Atoi(last[1:])
	if err != nil {
		t.Fatalf("__complete %q: directive %q: %v", args, last, err)
	}
	var values []string
	for _, l := range lines[:len(lines)-1] {
		v, _, _ := strings.Cut(l, "\t") // drop a description
		values = append(values, v)
	}
	return completion{values: values, directive: cobra.ShellCompDirective(d), stderr: stderr}
}

// want checks the candidates (in any order) and the directive.
func (c completion) want(t *testing.T, what string, values []string, directive cobra.ShellCompDirective) {
	t.Helper()
	got := slices.Sorted(slices.Values(c.values))
	values = slices.Sorted(slices.Values(values))
	if !slices.Equal(got, values) {
		t.Errorf("%s: candidates %q, want %q", what, got, values)
	}
	if c.directive != directive {
		t.Errorf("%s: directive %d, want %d", what, c.directive, directive)
	}
	c.quiet(t, what)
}

// quiet checks that stderr holds nothing but cobra's own directive line,
// which completion scripts discard.
func (c completion) quiet(t *testing.T, what string) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSuffix(c.stderr, "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, "Completion ended with directive:") {
			t.Errorf("%s: stderr has %q", what, l)
		}
	}
}

func TestCompletionOutput(t *testing.T) {
	noFiles := cobra.ShellCompDirectiveNoFileComp
	complete(t, "status", "-o", "").want(t, "-o", []string{"text", "json"}, noFiles)
	complete(t, "list", "--output", "j").want(t, "--output j", []string{"json"}, noFiles)
	complete(t, "status", "--output=t").want(t, "--output=t", []string{"text"}, noFiles)
}

func TestCompletionBackend(t *testing.T) {
	t.Setenv("DISTLOCK_BACKEND", "")
	d := cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	var all, re []string
	for _, s := range distlock.Schemes() {
		all = append(all, s+"://")
		if strings.HasPrefix(s, "re") {
			re = append(re, s+"://")
		}
	}
	if !slices.Contains(re, "redis://") || !slices.Contains(re, "redlock://") {
		t.Fatalf("schemes %q: the redis backends are not registered", all)
	}
	complete(t, "status", "--backend", "re").want(t, "--backend re", re, d)
	complete(t, "list", "--backend", "").want(t, "--backend ''", all, d)
	complete(t, "status", "--backend", "redis://127").want(t, "--backend redis://127", nil, d)
	complete(t, "doctor", "et").want(t, "doctor et", []string{"etcd://"}, d)
	complete(t, "migrate", "my").want(t, "migrate my", []string{"mysql://", "mysql+table://"}, d)
}

func TestCompletionRunFlags(t *testing.T) {
	noFiles := cobra.ShellCompDirectiveNoFileComp
	complete(t, "run", "--on-release-request", "US").want(t, "--on-release-request US", []string{"USR1", "USR2"}, noFiles)
	complete(t, "run", "--on-release-request", "n").want(t, "--on-release-request n", []string{"none"}, noFiles)
	complete(t, "run", "--once-per", "@").want(t, "--once-per @", []string{"@hourly", "@daily", "@weekly", "@monthly"}, noFiles)
	complete(t, "run", "--records", "p").want(t, "--records p", []string{"postgres://", "postgresql://"}, noFiles|cobra.ShellCompDirectiveNoSpace)
}

// holdLocks takes each key on the store at url with the library and
// releases them when the test ends.
func holdLocks(t *testing.T, url string, keys ...string) {
	t.Helper()
	ctx := context.Background()
	c, err := distlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, k := range keys {
		l, err := c.Lock(ctx, k, distlock.WithLease(time.Minute))
		if err != nil {
			t.Fatalf("lock %q: %v", k, err)
		}
		t.Cleanup(func() { _ = l.Release(context.Background()) })
	}
}

func TestCompletionKeys(t *testing.T) {
	t.Setenv("DISTLOCK_BACKEND", "")
	srv := testserver.Redis(t)
	url := "redis://" + srv.Addr()
	holdLocks(t, url, "jobs/nightly", "jobs/hourly", "other/job")
	// A key taken and released is not held: it is not offered.
	c, err := distlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(context.Background(), "jobs/done", distlock.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	noFiles := cobra.ShellCompDirectiveNoFileComp
	jobs := []string{"jobs/hourly", "jobs/nightly"}
	for _, args := range [][]string{
		{"status", "--backend", url, "jo"},
		{"status", "--backend=" + url, "jo"},
		{"release", "--force", "--backend", url, "jo"},
		{"release", "--request", "--backend", url, "jo"},
		{"hold", "--backend", url, "jo"},
		{"hold", "--backend", url, "--key", "jo"},
		{"run", "--backend", url, "--key", "jo"},
		{"run", "--backend", url, "--key=jo"},
		{"list", "--backend", url, "jo"},
	} {
		complete(t, args...).want(t, strings.Join(args, " "), jobs, noFiles)
	}
	complete(t, "status", "--backend", url, "").want(t, "status ''", append(jobs, "other/job"), noFiles)
	complete(t, "status", "--backend", url, "jobs/n").want(t, "status jobs/n", []string{"jobs/nightly"}, noFiles)
	complete(t, "status", "--backend", url, "nope").want(t, "status nope", nil, noFiles)
	// One key only: nothing after it, nor for hold's argument once --key is given.
	complete(t, "status", "--backend", url, "jobs/nightly", "").want(t, "status KEY ''", nil, noFiles)
	complete(t, "hold", "--backend", url, "--key", "jobs/x", "").want(t, "hold --key K ''", nil, noFiles)

	t.Setenv("DISTLOCK_BACKEND", url)
	complete(t, "status", "jo").want(t, "status jo with $DISTLOCK_BACKEND", jobs, noFiles)
}

// Many held keys: no more than wantLimit are offered.
func TestCompletionKeysBounded(t *testing.T) {
	t.Setenv("DISTLOCK_BACKEND", "")
	srv := testserver.Redis(t)
	url := "redis://" + srv.Addr()
	keys := make([]string, wantLimit+20)
	for i := range keys {
		keys[i] = fmt.Sprintf("many/%04d", i)
	}
	holdLocks(t, url, keys...)
	got := complete(t, "status", "--backend", url, "many/")
	got.want(t, "status many/", keys[:wantLimit], cobra.ShellCompDirectiveNoFileComp)
}

// A store that is not given, refuses connections or does not answer gets
// no candidates, no error and an answer within the completion timeout.
func TestCompletionUnreachable(t *testing.T) {
	t.Setenv("DISTLOCK_BACKEND", "")
	noFiles := cobra.ShellCompDirectiveNoFileComp
	complete(t, "status", "jo").want(t, "no store", nil, noFiles)
	complete(t, "status", "--backend", "nosuch://x", "jo").want(t, "unknown scheme", nil, noFiles)
	complete(t, "status", "--backend", "mem://", "jo").want(t, "empty store", nil, noFiles)

	ln, err := net.Listen("tcp", testserver.Host+":0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "redis://" + ln.Addr().String()
	ln.Close()

	paused := testserver.Redis(t)
	// A key held there, by a client that is gone before the store stops
	// (its pings would outlive the test otherwise).
	pc, err := distlock.Open(context.Background(), "redis://"+paused.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Lock(context.Background(), "jobs/a", distlock.WithLease(time.Minute)); err != nil {
		t.Fatal(err)
	}
	pc.Close()
	paused.Pause()
	defer paused.Resume()

	ignore := goleak.IgnoreCurrent()
	for name, url := range map[string]string{"refused": closed, "paused": "redis://" + paused.Addr()} {
		start := time.Now()
		got := complete(t, "status", "--backend", url, "jo")
		took := time.Since(start)
		got.want(t, name, nil, noFiles)
		if limit := wantTimeout + 3*time.Second; took > limit {
			t.Errorf("%s: completion took %v, want at most %v", name, took, limit)
		}
	}
	// The Redis client retries a refused connection after a backoff of up
	// to a second, in a goroutine that outlives its Close; what the
	// completions started must still end, soon.
	for deadline := time.Now().Add(5 * time.Second); ; {
		err := goleak.Find(ignore)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines left by the completions: %v", err)
			break
		}
	}
}

func TestCompletionScript(t *testing.T) {
	for shell, want := range map[string]string{
		"bash":       "bash completion V2 for distlock",
		"zsh":        "#compdef distlock",
		"fish":       "fish completion for distlock",
		"powershell": "powershell completion for distlock",
	} {
		code, stdout, stderr := runMain("completion", shell)
		if code != 0 || !strings.Contains(stdout, want) || !strings.Contains(stdout, cobra.ShellCompRequestCmd) {
			t.Errorf("completion %s: exit %d, stdout without %q or %s (%d bytes); stderr %q", shell, code, want, cobra.ShellCompRequestCmd, len(stdout), stderr)
		}
	}
}
