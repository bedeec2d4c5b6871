package pinned

import (
	"fmt"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

// Defaults of the settings that every pinned backend shares.
const (
	DefaultPoolWait        = time.Second
	DefaultRequestTimeout  = 5 * time.Second
	DefaultCleanupInterval = time.Minute
	DefaultCleanupBatch    = 1000
	DefaultRetention       = 10 * time.Minute
)

// MinKeepalive is the shortest keepalive interval SetKeepalive accepts.
const MinKeepalive = 10 * time.Millisecond

// Settings are the options that every pinned backend has. A backend embeds
// them in its options, and each of its With functions, which documents the
// backend's own default and meaning, calls one setter. A setter's error
// matches driver.ErrInvalidOption and names the With function.
type Settings struct {
	// PoolWait bounds the wait for a free connection of the pool.
	PoolWait time.Duration
	// Keepalive caps the interval between two checks of a held lock's
	// session (Config.Keepalive).
	Keepalive time.Duration
	// RequestTimeout bounds each request to the server.
	RequestTimeout time.Duration
	// CleanupInterval is the time between two deletions of stale holder
	// rows; 0: none but those the user asks for.
	CleanupInterval time.Duration
	// CleanupBatch caps the rows one cleanup deletes.
	CleanupBatch int
	// Retention is how long the row of a key nobody holds stays after its
	// lease ended.
	Retention time.Duration

	spec Spec
}

// Spec is what a backend's settings differ in.
type Spec struct {
	// Name is the backend's package name, which begins every error.
	Name string
	// Keepalive is the default of Settings.Keepalive.
	Keepalive time.Duration
	// MinRetention is the shortest retention SetRetention accepts.
	MinRetention time.Duration
}

// NewSettings returns the defaults of the backend that spec describes.
func NewSettings(spec Spec) Settings {
	return Settings{PoolWait: DefaultPoolWait, Keepalive: spec.Keepalive, RequestTimeout: DefaultRequestTimeout,
		CleanupInterval: DefaultCleanupInterval, CleanupBatch: DefaultCleanupBatch, Retention: DefaultRetention, spec: spec}
}

// Apply returns c with opts applied in order, or the first error of one.
func Apply[C any, O ~func(*C) error](c C, opts []O) (C, error) {
	for _, o := range opts {
		if err := o(&c); err != nil {
			var zero C
			return zero, err
		}
	}
	return c, nil
}

// Invalid is the error for option set to v; want says what it accepts.
func (s *Settings) Invalid(option string, v any, want string) error {
	return fmt.Errorf("%s: %s(%v): %w: %s", s.spec.Name, option, v, driver.ErrInvalidOption, want)
}

// SetPoolWait sets PoolWait to d, which must be positive.
func (s *Settings) SetPoolWait(d time.Duration) error {
	return s.setPositive(&s.PoolWait, "WithPoolWait", d)
}

// SetKeepalive sets Keepalive to d, which must be at least MinKeepalive.
func (s *Settings) SetKeepalive(d time.Duration) error {
	if d < MinKeepalive {
		return s.Invalid("WithKeepalive", d, fmt.Sprintf("want at least %v", MinKeepalive))
	}
	s.Keepalive = d
	return nil
}

// SetRequestTimeout sets RequestTimeout to d, which must be positive.
func (s *Settings) SetRequestTimeout(d time.Duration) error {
	return s.setPositive(&s.RequestTimeout, "WithRequestTimeout", d)
}

// SetCleanupInterval sets CleanupInterval to d, which must not be negative.
func (s *Settings) SetCleanupInterval(d time.Duration) error {
	if d < 0 {
		return s.Invalid("WithCleanupInterval", d, "want 0 (off) or a positive duration")
	}
	s.CleanupInterval = d
	return nil
}

// SetCleanupBatch sets CleanupBatch to n, which must be positive.
func (s *Settings) SetCleanupBatch(n int) error {
	if n <= 0 {
		return s.Invalid("WithCleanupBatch", n, "want a positive number of rows")
	}
	s.CleanupBatch = n
	return nil
}

// SetRetention sets Retention to d, which must be at least the backend's
// Spec.MinRetention.
func (s *Settings) SetRetention(d time.Duration) error {
	if least := s.spec.MinRetention; d < least {
		want := "want at least " + short(least)
		if least == 0 {
			want = "want 0 or a positive duration"
		}
		return s.Invalid("WithRetention", d, want)
	}
	s.Retention = d
	return nil
}

// setPositive sets *field to d, which must be positive, for option.
func (s *Settings) setPositive(field *time.Duration, option string, d time.Duration) error {
	if d <= 0 {
		return s.Invalid(option, d, "want a positive duration")
	}
	*field = d
	return nil
}

// short is d as its String method writes it, less the zero units that end
// a whole number of minutes or hours: 1m, not 1m0s.
func short(d time.Duration) string {
	s := d.String()
	if d != 0 && d%time.Minute == 0 {
		s = strings.TrimSuffix(s, "0s")
		if d%time.Hour == 0 {
			s = strings.TrimSuffix(s, "0m")
		}
	}
	return s
}
