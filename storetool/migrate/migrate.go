// Package migrate creates the schema of a lock store: the tables a backend
// needs and does not create on its own (sqllock's lease table, DynamoDB's
// table), and, where a backend creates its tables on first use (pglock,
// mysqllock), the same tables ahead of it, at deployment, by a role that
// may create them while the locking role may not.
//
// The migration of a store lives beside its backend, in the backend's tool
// package (backend/sqllock/sqltool, ...), which registers it for the
// store's URL schemes from init, as it registers its doctor checks; a
// scheme whose store keeps no schema says so with None. A program imports
// the tool packages of the stores it migrates, usually blank:
//
//	import _ "github.com/distlock/distlock/backend/sqllock/sqltool"
package migrate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/registry"
)

// Func creates, where missing, the schema of the store u names, whose
// scheme it was registered for, and leaves what exists as it is; it
// returns what the schema is, for a message ("the lease table
// distlock_leases and ..."). It reads u with the backend's ParseURL, so
// that a URL it cannot use fails with an error matching
// driver.ErrInvalidOption before anything is dialled.
type Func func(ctx context.Context, u *url.URL) (schema string, err error)

// funcs holds the registered migrations by URL scheme.
var funcs = registry.New[Func]("migrate")

// Register makes f the migration of URLs of scheme. Tool packages call it
// from init. It panics if f is nil or scheme is already registered (by
// Register or None).
func Register(scheme string, f Func) {
	if f == nil {
		panic("migrate: Register needs a function")
	}
	funcs.Add(scheme, f)
}

// None declares that the store of scheme keeps no schema, and why. It
// panics if reason is empty or scheme is already registered.
func None(scheme, reason string) { funcs.Decline(scheme, reason) }

// Schemes returns the schemes that have a migration, sorted.
func Schemes() []string { return funcs.Schemes() }

// Declined returns the schemes declared with None, with their reasons.
func Declined() map[string]string { return funcs.Declined() }

// ErrInvalidURL marks a URL Run cannot use: not a URL, or a scheme it does
// not know. Nothing was sent.
var ErrInvalidURL = errors.New("migrate: invalid store URL")

// Result is what Run did.
type Result struct {
	// URL is the store's URL, its secrets redacted.
	URL string `json:"url"`
	// Schema is what exists now, created where it was missing.
	Schema string `json:"schema,omitempty"`
	// None says why the store has no schema, where it has none; nothing
	// was sent to it.
	None string `json:"none,omitempty"`
}

// Run creates, where missing, the schema of the store rawURL names with the
// migration registered for its scheme. A URL it cannot use fails with an
// error matching ErrInvalidURL, or driver.ErrInvalidOption as the backend
// refuses it, before anything is dialled; a store without a schema is
// reported in Result.None, and nothing is sent. ctx bounds the whole run.
func Run(ctx context.Context, rawURL string) (*Result, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidURL, err)
	}
	f, reason, ok := funcs.Lookup(u.Scheme)
	r := &Result{URL: driver.RedactURL(u)}
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %q: unknown scheme %q (forgotten import?); migrate knows %s",
			ErrInvalidURL, r.URL, u.Scheme, strings.Join(Schemes(), ", "))
	case f == nil:
		r.None = u.Scheme + ":// keeps no schema: " + reason
		return r, nil
	}
	if r.Schema, err = f(ctx, u); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", r.URL, err)
	}
	return r, nil
}

// Command returns the command line that creates the schema of the store
// rawURL names, its secrets redacted, for a message that tells how to fix
// a missing schema: distlock migrate 'URL'.
func Command(rawURL string) string {
	return "distlock migrate '" + driver.Redact(rawURL) + "'"
}
