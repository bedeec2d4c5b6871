// Package doctortest holds the assertions the tests of doctor checks
// share: run a check and fail on an error, look for a finding, and test
// that bad URLs and unreachable stores fail as doctor.Check promises.
package doctortest

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/storetool/doctor"
)

// Run checks rawURL within a minute and fails the test on an error.
func Run(t testing.TB, rawURL string, o doctor.Options) *doctor.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := doctor.Check(ctx, rawURL, o)
	if err != nil {
		t.Fatalf("Check(%s): %v", rawURL, err)
	}
	return r
}

// Findings returns the findings of check.
func Findings(r *doctor.Report, check string) []doctor.Finding {
	var out []doctor.Finding
	for _, f := range r.Findings {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

// Want asserts that r has a finding of check with severity sev whose Seen
// contains seen, that every finding of check has a severity no worse than
// sev, and that a Danger or Warning has a consequence and a fix; it returns
// the finding.
func Want(t testing.TB, r *doctor.Report, check string, sev doctor.Severity, seen string) doctor.Finding {
	t.Helper()
	var found *doctor.Finding
	for _, f := range Findings(r, check) {
		if f.Severity < sev {
			t.Errorf("%s: %s finding %q, want at most %s", check, f.Severity, f.Seen, sev)
		}
		if f.Severity == sev && strings.Contains(f.Seen, seen) && found == nil {
			found = &f
		}
	}
	if found == nil {
		t.Fatalf("no %s finding %s containing %q in:\n%s", sev, check, seen, Dump(r))
	}
	if sev != doctor.Info && (found.Consequence == "" || found.Fix == "") {
		t.Errorf("%s finding %s has no consequence or fix: %+v", sev, check, *found)
	}
	return *found
}

// Clean asserts that r has neither dangers nor warnings.
func Clean(t testing.TB, r *doctor.Report) {
	t.Helper()
	if r.Count(doctor.Danger)+r.Count(doctor.Warning) > 0 {
		t.Fatalf("want no danger or warning, got:\n%s", Dump(r))
	}
}

// Dump lists the findings for a failure message.
func Dump(r *doctor.Report) string {
	var b strings.Builder
	for _, f := range r.Findings {
		b.WriteString("  " + f.Severity.String() + " " + f.Check + " [" + f.Node + "] " + f.Seen + "\n")
	}
	return b.String()
}

// InvalidURLs asserts that doctor.Check refuses each URL that urls makes
// with an error matching doctor.ErrInvalidURL, and that none of them
// connects: addr, which urls may use as a store's address, is a loopback
// listener that counts connections.
func InvalidURLs(t *testing.T, urls func(addr string) []string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- struct{}{}:
			default:
			}
			_ = c.Close()
		}
	}()
	defer func() { _ = l.Close(); <-done }()
	for _, u := range urls(l.Addr().String()) {
		_, err := doctor.Check(context.Background(), u, doctor.Options{})
		if !errors.Is(err, doctor.ErrInvalidURL) {
			t.Errorf("Check(%q) = %v, want ErrInvalidURL", u, err)
		}
	}
	select {
	case <-accepted:
		t.Error("an invalid URL made a connection")
	default:
	}
}

// Unreachable asserts that doctor.Check fails on each URL that urls makes
// from addr, a loopback address where nothing listens, with an error
// matching doctor.ErrUnreachable that names the refused connection, within
// five seconds.
func Unreachable(t *testing.T, urls func(addr string) []string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	for _, u := range urls(addr) {
		start := time.Now()
		_, err := doctor.Check(context.Background(), u, doctor.Options{Timeout: time.Second})
		if !errors.Is(err, doctor.ErrUnreachable) || !strings.Contains(err.Error(), "refused") {
			t.Errorf("Check(%q) = %v, want ErrUnreachable naming the refused connection", u, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Check(%q) took %v", u, d)
		}
	}
}

// Refused asserts that parse, a backend's ParseURL, refuses each of urls,
// and that doctor.Check refuses it too, with an error matching
// doctor.ErrInvalidURL and driver.ErrInvalidOption that carries parse's
// message: doctor and distlock.Open refuse the same URLs, in the same
// words. The URLs should name a store that does not listen, so that a URL
// the check does not refuse fails differently.
func Refused[C any](t *testing.T, parse func(*url.URL) (C, error), urls ...string) {
	t.Helper()
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, want := parse(u)
		if want == nil {
			t.Errorf("the backend accepts %q", raw)
			continue
		}
		_, err = doctor.Check(context.Background(), raw, doctor.Options{Timeout: time.Second})
		if !errors.Is(err, doctor.ErrInvalidURL) || !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), want.Error()) {
			t.Errorf("Check(%q) = %v, want ErrInvalidURL with the backend's %q", raw, err, want)
		}
	}
}
