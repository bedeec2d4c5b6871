package urlq_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/urlq"
)

// values is what every test reads into: each field starts at a default
// that a missing parameter must leave alone.
type values struct {
	d    time.Duration
	b    bool
	n    int
	size int64
	f    float64
	s    string
	ss   []string
	enum string
}

func defaults() values {
	return values{d: time.Second, n: 7, size: 1, f: 0.5, s: "def", enum: "a"}
}

func read(query string) (values, url.Values, error) {
	q, err := url.ParseQuery(query)
	if err != nil {
		panic(err)
	}
	v := defaults()
	r := urlq.New("xlock", q)
	r.Duration("d", &v.d)
	r.Bool("b", &v.b)
	r.Int("n", &v.n)
	r.Size("size", &v.size)
	r.Float("f", &v.f)
	r.String("s", &v.s)
	r.Strings("ss", &v.ss)
	r.Func("enum", func(s string) error {
		if s != "a" && s != "b" {
			return errors.New("want a or b")
		}
		v.enum = s
		return nil
	})
	var rest url.Values
	if strings.Contains(query, "pass") {
		rest = r.Rest()
	}
	return v, rest, r.Done()
}

func TestReads(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  func(*values)
	}{
		{"", func(*values) {}},
		{"d=250ms", func(v *values) { v.d = 250 * time.Millisecond }},
		{"d=0s", func(v *values) { v.d = 0 }},
		{"b=true", func(v *values) { v.b = true }},
		{"b=1", func(v *values) { v.b = true }},
		{"n=-3", func(v *values) { v.n = -3 }},
		{"size=512", func(v *values) { v.size = 512 }},
		{"size=64KiB", func(v *values) { v.size = 64 << 10 }},
		{"size=2GiB", func(v *values) { v.size = 2 << 30 }},
		{"f=0.01", func(v *values) { v.f = 0.01 }},
		{"s=a%20b", func(v *values) { v.s = "a b" }},
		{"ss=x&ss=y", func(v *values) { v.ss = []string{"x", "y"} }},
		{"enum=b", func(v *values) { v.enum = "b" }},
		{"d=2s&b=false&n=0&f=0&s=z", func(v *values) { v.d, v.n, v.f, v.s = 2*time.Second, 0, 0, "z" }},
	} {
		want := defaults()
		tc.want(&want)
		got, _, err := read(tc.query)
		if err != nil {
			t.Errorf("%q: %v", tc.query, err)
			continue
		}
		if got.d != want.d || got.b != want.b || got.n != want.n || got.size != want.size || got.f != want.f ||
			got.s != want.s || strings.Join(got.ss, ",") != strings.Join(want.ss, ",") || got.enum != want.enum {
			t.Errorf("%q: read %+v, want %+v", tc.query, got, want)
		}
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		query, want string
	}{
		{"d=5", `xlock: URL parameter d="5": distlock: invalid option: want a duration such as 500ms, 5s or 1m30s`},
		{"d=", `xlock: URL parameter d: distlock: invalid option: want a duration`},
		{"b=yes", `xlock: URL parameter b="yes": distlock: invalid option: want true or false`},
		{"n=1.5", `xlock: URL parameter n="1.5": distlock: invalid option: want an integer`},
		{"size=-1", `xlock: URL parameter size="-1": distlock: invalid option: want a size`},
		{"size=1TiB", `want a size`},
		{"size=9000000000GiB", `want a size`},
		{"f=NaN", `xlock: URL parameter f="NaN": distlock: invalid option: want a number`},
		{"f=1e999", `want a number`},
		{"s=", `xlock: URL parameter s: distlock: invalid option: empty`},
		{"ss=x&ss=", `xlock: URL parameter ss: distlock: invalid option: empty`},
		{"enum=c", `xlock: URL parameter enum="c": distlock: invalid option: want a or b`},
		{"d=1s&d=2s", `xlock: URL parameter d: distlock: invalid option: given 2 times`},
		{"colour=red", `xlock: URL parameter colour: distlock: invalid option: unknown (known: b, d, enum, f, n, s, size, ss)`},
		{"z=1&colour=red&d=1s", `xlock: URL parameter colour, z: distlock: invalid option: unknown (known: `},
		// The first error wins over later ones and over unknown names.
		{"b=x&n=y&colour=red", `URL parameter b="x"`},
	} {
		_, _, err := read(tc.query)
		if !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("%q: error %v, want one matching driver.ErrInvalidOption", tc.query, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error\n%v\nwant it to hold\n%s", tc.query, err, tc.want)
		}
		if strings.Contains(err.Error(), "red") && !strings.Contains(tc.want, "red") {
			t.Errorf("%q: error %v shows an unknown parameter's value", tc.query, err)
		}
	}
}

func TestErrorLeavesDestinationsAfterIt(t *testing.T) {
	got, _, err := read("b=x&n=9")
	if err == nil || got.n != defaults().n {
		t.Errorf("after a bad b, n = %d (error %v); want the default %d untouched", got.n, err, defaults().n)
	}
}

func TestRest(t *testing.T) {
	_, rest, err := read("d=1s&pass=1&pass_too=x&pass_too=y")
	if err != nil {
		t.Fatal(err)
	}
	if rest.Encode() != "pass=1&pass_too=x&pass_too=y" {
		t.Errorf("rest %q", rest.Encode())
	}
}

func TestPass(t *testing.T) {
	q, _ := url.ParseQuery("a=1&b=2&b=3&c=4")
	r := urlq.New("xlock", q)
	if got := r.Pass("b", "z").Encode(); got != "b=2&b=3" {
		t.Errorf("Pass(b, z) = %q", got)
	}
	var a int
	if !r.Int("a", &a) || a != 1 {
		t.Errorf("Int(a) = %d", a)
	}
	var e time.Duration
	if r.Duration("e", &e) {
		t.Error("Duration(e) of an absent e reports it set")
	}
	if err := r.Done(); err == nil || !strings.Contains(err.Error(), "parameter c:") || !strings.Contains(err.Error(), "known: a, b, e, z") {
		t.Errorf("Done() = %v, want c unknown, a, b, e, z known", err)
	}
}

func TestInvalidf(t *testing.T) {
	cause := errors.New("cause")
	err := urlq.Invalidf("xlock", "host", "no node: %w", cause)
	if !errors.Is(err, driver.ErrInvalidOption) || !errors.Is(err, cause) {
		t.Errorf("%v does not wrap both", err)
	}
	if want := "xlock: URL host: distlock: invalid option: no node: cause"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestParse(t *testing.T) {
	_, err := urlq.Parse("xlock", "redis://user:secret@host:port:bad/")
	if !errors.Is(err, driver.ErrInvalidOption) || strings.Contains(err.Error(), "secret") {
		t.Errorf("error %v: want one matching driver.ErrInvalidOption, without the password", err)
	}
	if !strings.HasPrefix(err.Error(), "xlock: URL syntax: distlock: invalid option: ") {
		t.Errorf("error %q", err)
	}
	if u, err := urlq.Parse("xlock", "mem://a"); err != nil || u.Host != "a" {
		t.Errorf("Parse(mem://a) = %v, %v", u, err)
	}
}
