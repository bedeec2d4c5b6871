// Package doctor inspects a lock store's configuration for what silently
// breaks locks: settings under which a held lock can vanish, a fence can go
// back, a session holding a lock can be ended, or a cluster cannot grant.
//
// Check connects to the store a distlock URL names, reads its settings with
// the store's own client library (read-only: doctor writes nothing), and
// returns a Report of Findings, each with a severity, what was seen, its
// consequence for locks and the fix.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/distlock/distlock/driver"
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
	Store    string    `json:"store"` // redis, etcd, postgres, zookeeper, mysql, dynamodb
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

// add appends a finding.
func (r *Report) add(f Finding) { r.Findings = append(r.Findings, f) }

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

// checker runs the checks of one kind of store.
type checker func(ctx context.Context, u *url.URL, o Options, r *Report) error

// checkers maps URL schemes to their store name and checker.
var checkers = map[string]struct {
	store string
	check checker
}{
	"redis":          {"redis", checkRedis},
	"rediss":         {"redis", checkRedis},
	"redis-sentinel": {"redis", checkRedis},
	"redis-cluster":  {"redis", checkRedis},
	"etcd":           {"etcd", checkEtcd},
	"postgres":       {"postgres", checkPostgres},
	"postgresql":     {"postgres", checkPostgres},
	"zk":             {"zookeeper", checkZooKeeper},
	"mysql":          {"mysql", checkMySQL},
	"mysql+table":    {"mysql", checkMySQL},
	"dynamodb":       {"dynamodb", checkDynamoDB},
}

// Schemes is the URL schemes Check knows, for messages.
const Schemes = "redis, rediss, redis-sentinel, redis-cluster, etcd, postgres, postgresql, zk, mysql, mysql+table, dynamodb"

// Check inspects the store rawURL names. A URL it cannot use fails with an
// error matching ErrInvalidURL before anything is dialled; a store it cannot
// reach, with one matching ErrUnreachable. Once connected, a check that
// cannot be made is a Warning finding, not an error. ctx bounds the whole
// run.
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
	c, ok := checkers[u.Scheme]
	if !ok {
		return nil, fmt.Errorf("%w: %q: unknown scheme %q (doctor checks %s)", ErrInvalidURL, driver.RedactURL(u), u.Scheme, Schemes)
	}
	r := &Report{URL: driver.RedactURL(u), Store: c.store, Findings: []Finding{}}
	if err := c.check(ctx, u, o, r); err != nil {
		return nil, err
	}
	return r, nil
}

// invalid returns an ErrInvalidURL error about u.
func invalid(u *url.URL, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidURL, driver.RedactURL(u), fmt.Sprintf(format, args...))
}

// unreachable returns an ErrUnreachable error naming what failed.
func unreachable(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrUnreachable, what, err)
}

// unread is the Warning for a setting that could not be read.
func unread(check, node string, err error, byHand string) Finding {
	return Finding{Severity: Warning, Check: check, Node: node,
		Seen:        fmt.Sprintf("could not read it: %v", err),
		Consequence: "this check was not made",
		Fix:         byHand}
}
