package policy_test

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/policy"
)

func TestLoadFile(t *testing.T) {
	cfg, err := policy.LoadFile("testdata/groups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"payment/42":        "payments",
		"refund/7":          "payments",
		"report/daily":      "reports",
		"report/export/csv": "report-exports",
		"reportx":           "default",
		"payments":          "default",
	} {
		if got := p.Group(key); got != want {
			t.Errorf("Group(%q) = %q, want %q", key, got, want)
		}
	}
	if got := p.MaxHold("payment/42"); got != 2*time.Minute {
		t.Errorf("MaxHold(payment/42) = %v, want the payments group's 2m", got)
	}
	if got := p.MaxHold("report/daily"); got != cfg.Groups[1].MaxHold {
		t.Errorf("MaxHold(report/daily) = %v, want the reports group's %v", got, cfg.Groups[1].MaxHold)
	}
	pay := cfg.Groups[0]
	if !pay.Critical || pay.Lease != 10*time.Second || pay.MaxLease != time.Minute || pay.MaxWait != 5*time.Second || pay.MaxHold != 2*time.Minute {
		t.Errorf("payments = %+v", pay)
	}
	if d := cfg.Groups[1].Degrade; d.EnterP99 != 250*time.Millisecond || d.LeaveP99 != 100*time.Millisecond || d.MinRecovery != 10*time.Second {
		t.Errorf("reports degrade = %+v", d)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want string
	}{
		{"unknown field", "groups:\n  - name: a\n    prefixes: [a/]\n    max_leese: 1s\n", "max_leese"},
		{"not a duration", "default:\n  max_wait: 5\n", "line 2: cannot unmarshal !!int `5` into time.Duration"},
		{"no name", "groups:\n  - prefixes: [a/]\n", "needs a name"},
		{"no prefix", "groups:\n  - name: a\n", "at least one prefix"},
		{"empty prefix", "groups:\n  - name: a\n    prefixes: ['']\n", "empty prefix"},
		{"default prefixes", "default:\n  prefixes: [a/]\n", "default group has no prefixes"},
		{"twice", "groups:\n  - {name: a, prefixes: [a/]}\n  - {name: a, prefixes: [b/]}\n", `"a" is defined twice`},
		{"shared prefix", "groups:\n  - {name: a, prefixes: [x/]}\n  - {name: b, prefixes: [x/]}\n", `prefix "x/" is in groups "a" and "b"`},
		{"named default", "groups:\n  - {name: default, prefixes: [x/]}\n", "default group's"},
		{"negative", "groups:\n  - {name: a, prefixes: [x/], max_hold: -1s}\n", "negative"},
		{"lease under min", "groups:\n  - {name: a, prefixes: [x/], lease: 1ms}\n", "under the minimum"},
		{"default lease over max", "groups:\n  - {name: a, prefixes: [x/], max_lease: 10s}\n", "lease 30s exceeds max_lease 10s"},
		{"lease over max", "groups:\n  - {name: a, prefixes: [x/], lease: 20s, max_lease: 10s}\n", "lease 20s exceeds max_lease 10s"},
		{"critical degrade", "groups:\n  - {name: a, prefixes: [x/], critical: true, degrade: {enter_p99: 1s}}\n", "critical group is never degraded"},
		{"leave over enter", "groups:\n  - {name: a, prefixes: [x/], degrade: {enter_p99: 1s, leave_p99: 2s}}\n", "leave_p99 2s must be under enter_p99 1s"},
		{"no enter", "groups:\n  - {name: a, prefixes: [x/], degrade: {leave_p99: 2s}}\n", "needs enter_p99"},
		{"negative window", "window: {length: -1s}\n", "must not be negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := policy.Load(strings.NewReader(c.yaml))
			if err == nil {
				_, err = policy.New(cfg)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestMinimalConfigs(t *testing.T) {
	cfg := policy.Config{Groups: []policy.Group{{Name: "a", Prefixes: []string{"a/"}, Degrade: policy.Degrade{EnterP99: time.Second}}}}
	if _, err := policy.New(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.New(policy.Config{}); err != nil {
		t.Fatalf("an empty config (everything in the default group): %v", err)
	}
	if _, err := policy.Load(strings.NewReader("")); err != nil {
		t.Fatalf("an empty file: %v", err)
	}
	if _, err := policy.LoadFile("testdata/missing.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: err = %v", err)
	}
}
