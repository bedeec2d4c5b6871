package zklock

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/distlock/distlock/driver"
)

const (
	// DefaultRoot is the node under which lock parents live.
	DefaultRoot = "/distlock"
	// DefaultSessionTimeout is the session timeout asked of the server.
	DefaultSessionTimeout = 10 * time.Second
	// DefaultDialTimeout bounds how long Dial waits for a session.
	DefaultDialTimeout = 5 * time.Second
	// DefaultRequestTimeout bounds each request to ZooKeeper.
	DefaultRequestTimeout = 5 * time.Second

	// MinSessionTimeout and MaxSessionTimeout bound WithSessionTimeout. The
	// server narrows the timeout further to its own bounds (2 to 20 ticks by
	// default).
	MinSessionTimeout = time.Second
	MaxSessionTimeout = 24 * time.Hour
	// MaxTimeout bounds WithDialTimeout and WithRequestTimeout.
	MaxTimeout = time.Hour
)

// config is what the options set.
type config struct {
	root           string
	sessionTimeout time.Duration
	dialTimeout    time.Duration
	requestTimeout time.Duration
}

func defaults() config {
	return config{
		root:           DefaultRoot,
		sessionTimeout: DefaultSessionTimeout,
		dialTimeout:    DefaultDialTimeout,
		requestTimeout: DefaultRequestTimeout,
	}
}

// Option configures a Backend. An invalid value makes New, Dial and Open
// fail with an error matching driver.ErrInvalidOption, before any request.
type Option func(*config) error

// apply runs opts over the defaults.
func apply(opts []Option) (config, error) {
	c := defaults()
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("zklock: nil option: %w", driver.ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// WithRoot sets the node under which lock parents live, such as "/myapp"
// or "/myapp/locks"; missing nodes on the way are created as persistent
// nodes. The default is DefaultRoot. A root must have at least one
// component, no empty, "." or ".." component, no control or non-character
// code point, and must not lie under /zookeeper.
func WithRoot(root string) Option {
	return func(c *config) error {
		r := "/" + strings.Trim(root, "/")
		if err := validRoot(r); err != nil {
			return fmt.Errorf("zklock: WithRoot(%q): %w: %s", root, driver.ErrInvalidOption, err)
		}
		c.root = r
		return nil
	}
}

func validRoot(r string) error {
	if r == "/" {
		return fmt.Errorf("the root node itself cannot hold lock parents")
	}
	for _, part := range strings.Split(r[1:], "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("component %q is not a node name", part)
		}
	}
	if r == "/zookeeper" || strings.HasPrefix(r, "/zookeeper/") {
		return fmt.Errorf("/zookeeper is the server's own")
	}
	for _, ch := range r {
		if unicode.IsControl(ch) || (ch >= 0xd800 && ch <= 0xf8ff) || ch >= 0xfff0 && ch <= 0xffff {
			return fmt.Errorf("%U is not allowed in a ZooKeeper path", ch)
		}
	}
	return nil
}

// WithSessionTimeout sets the session timeout asked of the server, between
// MinSessionTimeout and MaxSessionTimeout. The default is
// DefaultSessionTimeout. It applies to Dial and Open; New uses the session
// of the connection it is given and only times disconnections with it, so
// pass the timeout the connection was made with.
func WithSessionTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < MinSessionTimeout || d > MaxSessionTimeout {
			return fmt.Errorf("zklock: WithSessionTimeout(%v): %w: want %v to %v", d, driver.ErrInvalidOption, MinSessionTimeout, MaxSessionTimeout)
		}
		c.sessionTimeout = d
		return nil
	}
}

// WithDialTimeout bounds how long Dial and Open wait for a session
// (and for the root to be created on it); failing that they return the last
// connection error. The caller's context bounds them too. The default is
// DefaultDialTimeout; it must be positive and at most MaxTimeout.
func WithDialTimeout(d time.Duration) Option {
	return func(c *config) error {
		if err := validTimeout(d); err != nil {
			return fmt.Errorf("zklock: WithDialTimeout(%v): %w", d, err)
		}
		c.dialTimeout = d
		return nil
	}
}

// WithRequestTimeout bounds each request to ZooKeeper, whatever the
// caller's context allows; a wait for a lock is not one request and is
// bounded by its context only. go-zookeeper queues requests while it has no
// connection, so without it a request could wait for as long as the store
// is unreachable. The default is DefaultRequestTimeout; it must be positive
// and at most MaxTimeout.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) error {
		if err := validTimeout(d); err != nil {
			return fmt.Errorf("zklock: WithRequestTimeout(%v): %w", d, err)
		}
		c.requestTimeout = d
		return nil
	}
}

func validTimeout(d time.Duration) error {
	if d <= 0 || d > MaxTimeout {
		return fmt.Errorf("%w: want more than 0 and at most %v", driver.ErrInvalidOption, MaxTimeout)
	}
	return nil
}
