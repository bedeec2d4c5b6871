// Package urlq reads the query parameters of a backend's URL into typed
// destinations, so that every backend reads its URL grammar the same way
// and fails with one error shape.
//
// A Reader is used once, in a backend's ParseURL:
//
//	r := urlq.New("redislock", u.Query())
//	r.Duration("request_timeout", &cfg.RequestTimeout)
//	r.Bool("tls", &cfg.TLS)
//	if err := r.Done(); err != nil {
//		return Config{}, err
//	}
//
// A read of an absent parameter leaves its destination alone, so a
// destination that holds the default keeps it. A parameter given twice, a
// value that does not parse, and, at Done, a parameter nobody read, are
// errors matching driver.ErrInvalidOption, each of the form
//
//	redislock: URL parameter request_timeout="5": distlock: invalid option: want a duration such as 500ms, 5s or 1m30s
//	redislock: URL parameter colour: distlock: invalid option: unknown (known: prefix, request_timeout)
//
// naming the backend and the parameter but never the URL (distlock.Open
// names it once) nor the value of a parameter that is unknown or holds
// text (it may be a secret). Invalidf makes the same shape for the other
// parts of a URL: its host, path or user.
package urlq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

// Reader reads one URL's query. Each read reports whether it set its
// destination: false for a parameter that is absent or bad. The first error
// is kept; reads after it do nothing, and Done returns it.
type Reader struct {
	pkg   string
	q     url.Values
	known []string // every name asked for, in the order asked
	err   error
}

// New returns a Reader of q whose errors begin with pkg, the backend's
// package name.
func New(pkg string, q url.Values) *Reader {
	return &Reader{pkg: pkg, q: q}
}

// Invalidf returns the error of a bad part of a URL (its "host", "path",
// "user", or "parameter NAME"), in package pkg, matching
// driver.ErrInvalidOption and, with %w in format, the cause:
//
//	pkg: URL part: distlock: invalid option: <format, args>
func Invalidf(pkg, part, format string, args ...any) error {
	return fmt.Errorf("%s: URL %s: %w: %w", pkg, part, driver.ErrInvalidOption, fmt.Errorf(format, args...))
}

// Error returns the error of parameter name in the Reader's shape: value, if
// not empty, is quoted in the message; the error wraps why. It is for the
// checks a backend makes itself, such as two parameters that exclude each
// other.
func (r *Reader) Error(name, value string, why error) error {
	part := "parameter " + name
	if value != "" {
		part += "=" + strconv.Quote(value)
	}
	return Invalidf(r.pkg, part, "%w", why)
}

// one returns the single value of name, and whether it is there, noting
// name as known. A parameter given more than once is an error.
func (r *Reader) one(name string) (string, bool) {
	r.known = append(r.known, name)
	vs, ok := r.q[name]
	if !ok || r.err != nil {
		return "", false
	}
	if len(vs) != 1 {
		r.err = r.Error(name, "", fmt.Errorf("given %d times", len(vs)))
		return "", false
	}
	return vs[0], true
}

// Func hands the value of name, if present, to parse; an error it returns
// becomes the Reader's, in the shape of the others, with the value shown.
// It is for values of a backend's own type (an enum, a list).
func (r *Reader) Func(name string, parse func(string) error) bool {
	v, ok := r.one(name)
	if !ok {
		return false
	}
	if err := parse(v); err != nil {
		r.err = r.Error(name, v, err)
		return false
	}
	return true
}

// String sets *dst to the value of name, which must not be empty. The value
// is never shown in an error.
func (r *Reader) String(name string, dst *string) bool {
	v, ok := r.one(name)
	switch {
	case !ok:
		return false
	case v == "":
		r.err = r.Error(name, "", errors.New("empty"))
		return false
	}
	*dst = v
	return true
}

// Strings appends every value of name to *dst; name may be given several
// times. No value may be empty.
func (r *Reader) Strings(name string, dst *[]string) bool {
	r.known = append(r.known, name)
	if r.err != nil || len(r.q[name]) == 0 {
		return false
	}
	if slices.Contains(r.q[name], "") {
		r.err = r.Error(name, "", errors.New("empty"))
		return false
	}
	*dst = append(*dst, r.q[name]...)
	return true
}

// Duration sets *dst to the value of name, a Go duration such as "250ms".
func (r *Reader) Duration(name string, dst *time.Duration) bool {
	return r.Func(name, func(v string) (err error) {
		*dst, err = parseDuration(v)
		return err
	})
}

// parseDuration is time.ParseDuration without its "time: " prefix, and
// with the value left out (the error shows it).
func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errors.New("want a duration such as 500ms, 5s or 1m30s")
	}
	return d, nil
}

// Bool sets *dst to the value of name: true, false, 1, 0, t, f (any case).
func (r *Reader) Bool(name string, dst *bool) bool {
	return r.Func(name, func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("want true or false")
		}
		*dst = b
		return nil
	})
}

// Int sets *dst to the value of name, a decimal integer.
func (r *Reader) Int(name string, dst *int) bool {
	return r.Func(name, func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errors.New("want an integer")
		}
		*dst = n
		return nil
	})
}

// Size sets *dst to the value of name, a count of bytes: a decimal integer
// with an optional suffix KiB, MiB or GiB (powers of 1024).
func (r *Reader) Size(name string, dst *int64) bool {
	return r.Func(name, func(v string) error {
		mult := int64(1)
		for _, s := range []struct {
			suffix string
			mult   int64
		}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
			if n, ok := strings.CutSuffix(v, s.suffix); ok {
				v, mult = n, s.mult
				break
			}
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > (1<<63-1)/mult {
			return errors.New("want a size such as 512, 64KiB or 16MiB")
		}
		*dst = n * mult
		return nil
	})
}

// Float sets *dst to the value of name, a finite decimal number.
func (r *Reader) Float(name string, dst *float64) bool {
	return r.Func(name, func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return errors.New("want a number such as 0.01")
		}
		*dst = f
		return nil
	})
}

// Pass returns those of the named parameters that are present, for the
// store's own client to read, and counts them as known. Unlike Rest, it
// leaves any other parameter to Done.
func (r *Reader) Pass(names ...string) url.Values {
	pass := url.Values{}
	for _, name := range names {
		r.known = append(r.known, name)
		if vs, ok := r.q[name]; ok {
			pass[name] = vs
		}
	}
	return pass
}

// Rest returns the parameters not read so far, for the store's own client
// to read (the driver's DSN parameters, say), and counts them as known: the
// caller hands them on to a parser that checks them.
func (r *Reader) Rest() url.Values {
	rest := url.Values{}
	for name, vs := range r.q {
		if !slices.Contains(r.known, name) {
			rest[name] = vs
			r.known = append(r.known, name)
		}
	}
	return rest
}

// Done returns the first error of the reads, or else an error naming every
// parameter that was not read, with the names that are known; nil if
// every parameter was read and valid.
func (r *Reader) Done() error {
	if r.err != nil {
		return r.err
	}
	var unknown []string
	for name := range r.q {
		if !slices.Contains(r.known, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	known := slices.Clone(r.known)
	slices.Sort(known)
	known = slices.Compact(known)
	want := "none"
	if len(known) > 0 {
		want = strings.Join(known, ", ")
	}
	return r.Error(strings.Join(unknown, ", "), "", fmt.Errorf("unknown (known: %s)", want))
}

// Parse is url.Parse for a backend's Open, whose error, unlike
// url.Parse's, does not repeat the URL (it may hold a password): it is
// Invalidf's shape with the parser's complaint.
func Parse(pkg, rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, Invalidf(pkg, "syntax", "%w", err)
	}
	return u, nil
}

// Opener adapts a backend's open function to the one distlock.Register
// takes, so that a failed open returns a nil driver.Backend rather than a
// typed nil pointer.
func Opener[B driver.Backend](open func(context.Context, *url.URL) (B, error)) func(context.Context, *url.URL) (driver.Backend, error) {
	return func(ctx context.Context, u *url.URL) (driver.Backend, error) {
		b, err := open(ctx, u)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
}
