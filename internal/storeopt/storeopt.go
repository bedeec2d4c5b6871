// Package storeopt holds what the stores of idem and stampede share of their
// options: the settings, their defaults and their checks. Each store keeps
// its own Option type over Config and documents its own With functions.
package storeopt

import (
	"fmt"
	"regexp"
	"time"

	"github.com/distlock/distlock"
)

// DefaultRequestTimeout bounds each request of a store unless its
// WithRequestTimeout says otherwise.
const DefaultRequestTimeout = 5 * time.Second

// Config is what a store's options set.
type Config struct {
	// Prefix is prefixed to every key of a store in a key-value server.
	Prefix string
	// Table is the table of a store in a SQL database.
	Table string
	// Timeout bounds each request.
	Timeout time.Duration
}

// tableName is an identifier, optionally qualified by one other.
var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// Apply returns defaults with opts applied. It returns an error matching
// distlock.ErrInvalidOption, begun by store, the store's package name,
// unless the timeout is positive and, for a store with a table (one in
// defaults), the table an identifier (letters, digits, underscores, one
// optional dot).
func Apply[O ~func(*Config)](store string, defaults Config, opts []O) (Config, error) {
	c := defaults
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.Timeout <= 0:
		return Config{}, fmt.Errorf("%s: %w: request timeout %v must be positive", store, distlock.ErrInvalidOption, c.Timeout)
	case defaults.Table != "" && !tableName.MatchString(c.Table):
		return Config{}, fmt.Errorf("%s: %w: table name %q is not an identifier", store, distlock.ErrInvalidOption, c.Table)
	}
	return c, nil
}
