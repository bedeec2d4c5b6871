package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

// The schemes the tests register; real stores register from their tool
// packages.
func init() {
	Register("doctortest", "teststore", func(_ context.Context, u *url.URL, o Options, r *Report) error {
		if u.Host == "" {
			return Invalid(u, "no host")
		}
		r.Add(Finding{Severity: Info, Check: "options", Seen: o.Lease.String() + " " + o.Timeout.String()})
		return nil
	})
	None("doctortest-none", "nothing to check in a test")
}

func TestCheckDispatches(t *testing.T) {
	r, err := Check(context.Background(), "doctortest://user:secret@host", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Store != "teststore" || r.URL != "doctortest://user:xxxxx@host" || len(r.Findings) != 1 ||
		r.Findings[0].Seen != DefaultLease.String()+" "+DefaultTimeout.String() {
		t.Errorf("report %+v", r)
	}
	if _, err := Check(context.Background(), "doctortest://", Options{}); !errors.Is(err, ErrInvalidURL) {
		t.Errorf("the check's own refusal: %v, want ErrInvalidURL", err)
	}
}

func TestCheckRefuses(t *testing.T) {
	for u, want := range map[string]struct {
		err  error
		says string
	}{
		"%zz":        {ErrInvalidURL, "invalid URL escape"},
		"foo://host": {ErrInvalidURL, `unknown scheme "foo" (forgotten import?); doctor checks doctortest`},
	} {
		_, err := Check(context.Background(), u, Options{})
		if !errors.Is(err, want.err) || !strings.Contains(err.Error(), want.says) {
			t.Errorf("Check(%q) = %v, want %v saying %q", u, err, want.err, want.says)
		}
	}
}

// A scheme declared with None gets a report of one Info finding, its
// reason, and no error.
func TestCheckNone(t *testing.T) {
	r, err := Check(context.Background(), "doctortest-none://user:secret@host", Options{})
	if err != nil || r.URL != "doctortest-none://user:xxxxx@host" || r.Store != "doctortest-none" ||
		len(r.Findings) != 1 || r.Findings[0].Severity != Info || r.Findings[0].Seen != "nothing to check in a test" {
		t.Errorf("Check = %+v, %v; want one info finding with the reason", r, err)
	}
}

func TestRefused(t *testing.T) {
	u, _ := url.Parse("doctortest://user:secret@host?colour=red")
	why := fmt.Errorf("testlock: URL parameter colour: %w: unknown", driver.ErrInvalidOption)
	err := Refused(u, why)
	if !errors.Is(err, ErrInvalidURL) || !errors.Is(err, driver.ErrInvalidOption) ||
		err.Error() != "doctor: invalid store URL: doctortest://user:xxxxx@host?colour=red: "+why.Error() {
		t.Errorf("Refused = %v", err)
	}
}

func TestRegisterRefusesDuplicates(t *testing.T) {
	for name, f := range map[string]func(){
		"again": func() {
			Register("doctortest", "x", func(context.Context, *url.URL, Options, *Report) error { return nil })
		},
		"none after":       func() { None("doctortest", "why") },
		"no check":         func() { Register("doctortest-new", "x", nil) },
		"none without why": func() { None("doctortest-new", "") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	if !slices.Contains(Schemes(), "doctortest") || Declined()["doctortest-none"] == "" {
		t.Errorf("Schemes() = %v, Declined() = %v", Schemes(), Declined())
	}
}

func TestClockReading(t *testing.T) {
	for _, c := range []struct {
		r    clockReading
		skew bool
	}{
		{clockReading{offset: 2 * time.Second, uncertainty: time.Millisecond}, true},
		{clockReading{offset: -2 * time.Second, uncertainty: time.Millisecond}, true},
		{clockReading{offset: 900 * time.Millisecond, uncertainty: 500 * time.Millisecond}, false},
		{clockReading{offset: 3 * time.Millisecond}, false},
	} {
		if got := c.r.skewed(); got != c.skew {
			t.Errorf("%v: skewed %v, want %v", c.r, got, c.skew)
		}
	}
	ahead := ClockFinding(context.Background(), "n", 0, func(context.Context) (time.Time, error) { return time.Now().Add(time.Hour), nil }, "why")
	if ahead.Severity != Warning || !strings.Contains(ahead.Seen, "ahead") || ahead.Consequence != "why" {
		t.Errorf("a clock an hour ahead: %+v", ahead)
	}
}
