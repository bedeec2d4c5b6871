package redislock

// DefaultPrefix is the key prefix used without WithPrefix.
const DefaultPrefix = "distlock:"

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix string
}

// WithPrefix sets the prefix of every Redis key and channel the backend uses.
// It must not contain braces: the backend puts the lock key in a hash tag
// right after it. The default is DefaultPrefix.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

func newConfig(opts []Option) (config, error) {
	c := config{prefix: DefaultPrefix}
	for _, o := range opts {
		o(&c)
	}
	return c, validatePrefix(c.prefix)
}
