package policy

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/distlock/distlock"
)

// Config maps key prefixes to lock groups. The same structure is read from
// YAML by Load; durations are written as Go durations ("30s", "1m30s").
type Config struct {
	// Default governs keys that no group's prefix matches. Its name is
	// DefaultGroup when empty, and it has no prefixes.
	Default Group `yaml:"default"`
	// Groups are matched by the longest prefix of the key.
	Groups []Group `yaml:"groups"`
	// Window is the sliding window of store latency behind degradation.
	Window Window `yaml:"window"`
}

// DefaultGroup is the name of Config.Default when it has none.
const DefaultGroup = "default"

// Group is a set of keys that share limits. A zero limit is no limit, and a
// group inherits nothing from the default group.
type Group struct {
	// Name labels the group's telemetry.
	Name string `yaml:"name"`
	// Prefixes select the group's keys.
	Prefixes []string `yaml:"prefixes"`
	// Lease is the lease of requests without WithLease (the watchdog renews
	// it). Zero keeps distlock.DefaultLease.
	Lease time.Duration `yaml:"lease"`
	// MaxLease refuses longer explicit leases.
	MaxLease time.Duration `yaml:"max_lease"`
	// MaxWait bounds waiting: a Lock without WithWait waits this long, a
	// longer WithWait is refused.
	MaxWait time.Duration `yaml:"max_wait"`
	// MaxHold caps how long the watchdog keeps a lock (distlock.WithMaxHold):
	// a request without one gets this cap, a longer one is refused.
	MaxHold time.Duration `yaml:"max_hold"`
	// Critical requests are never failed fast: they wait even while the
	// store is slow. A critical group has no Degrade thresholds.
	Critical bool `yaml:"critical"`
	// Degrade fails the group's requests fast with distlock.ErrDegraded
	// while the store is slow. Zero EnterP99 disables it.
	Degrade Degrade `yaml:"degrade"`
}

// Degrade sets the store latency at which a group fails fast, with
// hysteresis: it enters when the store's p99 reaches EnterP99 and leaves
// once the p99 has stayed under LeaveP99 for MinRecovery.
type Degrade struct {
	// EnterP99 is the p99 at which degradation begins.
	EnterP99 time.Duration `yaml:"enter_p99"`
	// LeaveP99 is the p99 under which recovery counts; EnterP99/2 when zero.
	LeaveP99 time.Duration `yaml:"leave_p99"`
	// MinRecovery is how long the p99 must stay under LeaveP99; 5s when zero.
	MinRecovery time.Duration `yaml:"min_recovery"`
}

// Window configures the sliding window of store request latency.
type Window struct {
	// Length is the span of time the p99 covers; 30s when zero.
	Length time.Duration `yaml:"length"`
	// MinSamples is the fewest requests in the window for degradation to
	// begin; 20 when zero.
	MinSamples int `yaml:"min_samples"`
}

// Defaults filled in by New.
const (
	DefaultMinRecovery = 5 * time.Second
	DefaultWindow      = 30 * time.Second
	DefaultMinSamples  = 20
)

// Load reads a YAML config from r. Unknown fields are errors. The config is
// checked by New.
func Load(r io.Reader) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("policy: config: %w", err)
	}
	return c, nil
}

// LoadFile reads a YAML config from the file at path.
func LoadFile(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("policy: config: %w", err)
	}
	defer f.Close()
	c, err := Load(f)
	if err != nil {
		return Config{}, fmt.Errorf("%w (in %s)", err, path)
	}
	return c, nil
}

// withDefaults returns c checked, with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if c.Default.Name == "" {
		c.Default.Name = DefaultGroup
	}
	if len(c.Default.Prefixes) > 0 {
		return Config{}, fmt.Errorf("policy: config: the default group has no prefixes")
	}
	if c.Window.Length == 0 {
		c.Window.Length = DefaultWindow
	}
	if c.Window.MinSamples == 0 {
		c.Window.MinSamples = DefaultMinSamples
	}
	if c.Window.Length < 0 || c.Window.MinSamples < 0 {
		return Config{}, fmt.Errorf("policy: config: window length %v and min_samples %d must not be negative", c.Window.Length, c.Window.MinSamples)
	}
	names := map[string]bool{}
	prefixes := map[string]string{}
	groups := append([]Group{c.Default}, c.Groups...)
	for i := range groups {
		g := &groups[i]
		if err := g.check(i == 0); err != nil {
			return Config{}, fmt.Errorf("policy: config: group %q: %w", g.Name, err)
		}
		if names[g.Name] {
			return Config{}, fmt.Errorf("policy: config: group %q is defined twice", g.Name)
		}
		names[g.Name] = true
		for _, p := range g.Prefixes {
			if other, ok := prefixes[p]; ok {
				return Config{}, fmt.Errorf("policy: config: prefix %q is in groups %q and %q", p, other, g.Name)
			}
			prefixes[p] = g.Name
		}
	}
	c.Default, c.Groups = groups[0], groups[1:]
	return c, nil
}

// check validates g and fills its defaults.
func (g *Group) check(isDefault bool) error {
	switch {
	case g.Name == "":
		return errors.New("a group needs a name")
	case !isDefault && len(g.Prefixes) == 0:
		return errors.New("a group needs at least one prefix")
	case !isDefault && g.Name == DefaultGroup:
		return fmt.Errorf("the name %q is the default group's", DefaultGroup)
	case g.Lease < 0 || g.MaxLease < 0 || g.MaxWait < 0 || g.MaxHold < 0 || g.Degrade.EnterP99 < 0 || g.Degrade.LeaveP99 < 0 || g.Degrade.MinRecovery < 0:
		return errors.New("durations must not be negative")
	case g.Lease != 0 && g.Lease < distlock.MinLease:
		return fmt.Errorf("lease %v is under the minimum %v", g.Lease, distlock.MinLease)
	}
	for _, p := range g.Prefixes {
		if p == "" {
			return errors.New("an empty prefix would match every key: use the default group")
		}
	}
	if lease := cmp.Or(g.Lease, distlock.DefaultLease); g.MaxLease > 0 && lease > g.MaxLease {
		return fmt.Errorf("lease %v exceeds max_lease %v (set lease)", lease, g.MaxLease)
	}
	d := &g.Degrade
	if d.EnterP99 == 0 {
		if *d != (Degrade{}) {
			return errors.New("degrade needs enter_p99")
		}
		return nil
	}
	if g.Critical {
		return errors.New("a critical group is never degraded: remove degrade")
	}
	d.LeaveP99 = cmp.Or(d.LeaveP99, d.EnterP99/2)
	d.MinRecovery = cmp.Or(d.MinRecovery, DefaultMinRecovery)
	if d.LeaveP99 >= d.EnterP99 {
		return fmt.Errorf("degrade leave_p99 %v must be under enter_p99 %v", d.LeaveP99, d.EnterP99)
	}
	return nil
}
