// Package toolurl reads the query parameters of a store URL that the store
// tools (doctor checks, bench floors) need before they connect, until each
// backend's own URL parsing gives them a configuration.
package toolurl

import (
	"fmt"
	"net/url"
	"time"
)

// Duration returns the duration in query parameter name, or def if q has
// none; a value that is not a duration fails, naming the parameter.
func Duration(q url.Values, name string, def time.Duration) (time.Duration, error) {
	if !q.Has(name) {
		return def, nil
	}
	d, err := time.ParseDuration(q.Get(name))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}
