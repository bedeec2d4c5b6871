// Package doctor inspects a lock store's configuration for what silently
// breaks locks: settings under which a held lock can vanish, a fence can go
// back, a session holding a lock can be ended, or a cluster cannot grant.
//
// Check connects to the store a distlock URL names, reads its settings with
// the store's own client library (read-only: doctor writes nothing), and
// returns a Report of Findings, each with a severity, what was seen, its
// consequence for locks and the fix.
//
// The checks of a store live beside its backend, in the backend's tool
// package (backend/redislock/redistool, ...), which registers them for the
// store's URL schemes from init, as the backend registers itself with
// distlock.Register; a scheme with nothing to check says so with None. A
// program imports the tool packages of the stores it checks, usually blank:
//
//	import _ "github.com/distlock/distlock/backend/redislock/redistool"
package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/registry"
)

// Severity ranks a finding.
type Severity int

// The severities, from the most to the least urgent.
const (
	// Danger: locks can be lost or doubled, or fences go back, in normal
	// operation or after an ordinary restart or failover.
	Danger Severity = iota
	// Warning: locks can be lost after a less common fault (a power loss,
	// a crash of the host), or a lock operation fails early; or a check
	// could not be made.
	Warning
	// Info: what was seen, for the record.
	Info
)

// Severities lists the severities in report order.
var Severities = []Severity{Danger, Warning, Info}

// String returns "danger", "warning" or "info".
func (s Severity) String() string {
	switch s {
	case Danger:
		return "danger"
	case Warning:
		return "warning"
	case Info:
		return "info"
	}
	return fmt.Sprintf("severity(%d)", int(s))
}

// MarshalText encodes the severity as its name.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a severity's name.
func (s *Severity) UnmarshalText(text []byte) error {
	for _, v := range Severities {
		if v.String() == string(text) {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("doctor: unknown severity %q", text)
}

// Finding is one thing doctor saw.
type Finding struct {
	Severity    Severity `json:"severity"`
	Check       string   `json:"check"`          // short name of the check, e.g. "maxmemory-policy"
	Node        string   `json:"node,omitempty"` // the server it concerns, if one
	Seen        string   `json:"seen"`
	Consequence string   `json:"consequence,omitempty"`
	Fix         string   `json:"fix,omitempty"`
}

// Report is the outcome of Check.
type Report struct {
	URL      string    `json:"url"`   // the URL checked, password redacted
	Store    string    `json:"store"` // the store's name its checks registered: redis, etcd, ...
	Findings []Finding `json:"findings"`
}

// Count returns the number of findings of severity s.
func (r *Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// Add appends a finding.
func (r *Report) Add(f Finding) { r.Findings = append(r.Findings, f) }

// Options tune the checks.
type Options struct {
	// Lease is the lease the locks take, which some checks compare
	// settings with. The default is 30s, distlock's default lease.
	Lease time.Duration
	// Timeout bounds each request to the store, and each connection
	// attempt. The default is 5s.
	Timeout time.Duration
}

// DefaultLease is Options.Lease's default, distlock's default lease.
const DefaultLease = 30 * time.Second

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = 5 * time.Second

// ErrInvalidURL marks a URL doctor cannot check: not a URL, a scheme it
// does not know, or a malformed store address. Nothing was sent.
var ErrInvalidURL = errors.New("doctor: invalid store URL")

// ErrUnreachable marks a store that could not be reached or refused the
// connection.
var ErrUnreachable = errors.New("doctor: store unreachable")

// CheckFunc runs the checks of one kind of store on u, whose scheme it was
// registered for, adding its findings to r. o has its defaults filled in.
// It reads u with the store backend's ParseURL, and a URL it cannot use
// fails with an error matching ErrInvalidURL (see Refused and Invalid)
// before anything is dialled; a store it cannot reach, with one
// matching ErrUnreachable (see Unreachable). Once connected, a check that
// cannot be made is a Warning finding (see Unread), not an error.
type CheckFunc func(ctx context.Context, u *url.URL, o Options, r *Report) error

// checker is a registered CheckFunc and the store it names in reports.
type checker struct {
	store string
	check CheckFunc
}

// checkers holds the registered checks by URL scheme.
var checkers = registry.New[checker]("doctor")

// Register makes check run for URLs of scheme, whose reports name store
// (redis, etcd, postgres, ...). Tool packages call it from init. It panics
// if scheme, store or check is missing, or scheme is already registered
// (by Register or None).
func Register(scheme, store string, check CheckFunc) {
	if store == "" || check == nil {
		panic("doctor: Register needs a store name and a check function")
	}
	checkers.Add(scheme, checker{store: store, check: check})
}

// None declares that doctor has no checks for scheme, and why: Check then
// reports the reason as its one Info finding. It panics if reason is empty or
// scheme is already registered.
func None(scheme, reason string) { checkers.Decline(scheme, reason) }

// Schemes returns the schemes that have checks, sorted.
func Schemes() []string { return checkers.Schemes() }

// Declined returns the schemes declared with None, with their reasons.
func Declined() map[string]string { return checkers.Declined() }

// Check inspects the store rawURL names with the checks registered for its
// scheme. A URL it cannot use fails with an error matching ErrInvalidURL
// before anything is dialled, and a scheme declared with None gets a report
// of one Info finding saying why, with nothing sent; a store it cannot
// reach fails with an error matching
// ErrUnreachable. Once connected, a check that cannot be made is a Warning
// finding, not an error. ctx bounds the whole run.
func Check(ctx context.Context, rawURL string, o Options) (*Report, error) {
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	c, reason, ok := checkers.Lookup(u.Scheme)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %q: unknown scheme %q (forgotten import?); doctor checks %s",
			ErrInvalidURL, driver.RedactURL(u), u.Scheme, strings.Join(Schemes(), ", "))
	case c.check == nil:
		return &Report{URL: driver.RedactURL(u), Store: u.Scheme, Findings: []Finding{{Severity: Info, Check: "nothing to check", Seen: reason}}}, nil
	}
	r := &Report{URL: driver.RedactURL(u), Store: c.store, Findings: []Finding{}}
	if err := c.check(ctx, u, o, r); err != nil {
		return nil, err
	}
	return r, nil
}

// Invalid returns an error matching ErrInvalidURL about u, with the
// password redacted.
func Invalid(u *url.URL, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidURL, driver.RedactURL(u), fmt.Sprintf(format, args...))
}

// Refused returns the error of a URL that the store's backend refuses:
// err, the error of the backend's ParseURL, wrapped so that it matches both
// ErrInvalidURL and what err matches (driver.ErrInvalidOption), after u
// with the password redacted. A check reads its URL with the backend's
// ParseURL, so that doctor refuses exactly the URLs distlock.Open refuses.
func Refused(u *url.URL, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrInvalidURL, driver.RedactURL(u), err)
}

// Unreachable returns an error matching ErrUnreachable naming what failed.
func Unreachable(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrUnreachable, what, err)
}

// Unread returns the Warning for a setting that could not be read: check
// and node as for any finding, err what went wrong, byHand how to make the
// check by hand.
func Unread(check, node string, err error, byHand string) Finding {
	return Finding{Severity: Warning, Check: check, Node: node,
		Seen:        fmt.Sprintf("could not read it: %v", err),
		Consequence: "this check was not made",
		Fix:         byHand}
}
