package pinned_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/pinned"
)

func TestSettingsRefuse(t *testing.T) {
	strict := pinned.Spec{Name: "strict", Keepalive: time.Second, MinRetention: time.Minute}
	loose := pinned.Spec{Name: "loose", Keepalive: 5 * time.Second}
	for _, c := range []struct {
		spec pinned.Spec
		set  func(*pinned.Settings) error
		want string
	}{
		{loose, func(s *pinned.Settings) error { return s.SetPoolWait(0) },
			"loose: WithPoolWait(0s): distlock: invalid option: want a positive duration"},
		{loose, func(s *pinned.Settings) error { return s.SetKeepalive(time.Millisecond) },
			"loose: WithKeepalive(1ms): distlock: invalid option: want at least 10ms"},
		{loose, func(s *pinned.Settings) error { return s.SetRequestTimeout(-1) },
			"loose: WithRequestTimeout(-1ns): distlock: invalid option: want a positive duration"},
		{loose, func(s *pinned.Settings) error { return s.SetCleanupInterval(-1) },
			"loose: WithCleanupInterval(-1ns): distlock: invalid option: want 0 (off) or a positive duration"},
		{loose, func(s *pinned.Settings) error { return s.SetCleanupBatch(0) },
			"loose: WithCleanupBatch(0): distlock: invalid option: want a positive number of rows"},
		{loose, func(s *pinned.Settings) error { return s.SetRetention(-time.Second) },
			"loose: WithRetention(-1s): distlock: invalid option: want 0 or a positive duration"},
		{strict, func(s *pinned.Settings) error { return s.SetRetention(time.Second) },
			"strict: WithRetention(1s): distlock: invalid option: want at least 1m"},
		{pinned.Spec{Name: "hours", MinRetention: 2 * time.Hour}, func(s *pinned.Settings) error { return s.SetRetention(time.Hour) },
			"hours: WithRetention(1h0m0s): distlock: invalid option: want at least 2h"},
	} {
		s := pinned.NewSettings(c.spec)
		before := s
		err := c.set(&s)
		if !errors.Is(err, driver.ErrInvalidOption) || err.Error() != c.want {
			t.Errorf("got %v, want %q matching ErrInvalidOption", err, c.want)
		}
		if s != before {
			t.Errorf("%q changed the settings: %+v, was %+v", c.want, s, before)
		}
	}
}

func TestSettingsAccept(t *testing.T) {
	s := pinned.NewSettings(pinned.Spec{Name: "x", Keepalive: time.Second, MinRetention: time.Minute})
	if s.Keepalive != time.Second || s.PoolWait != pinned.DefaultPoolWait || s.Retention != pinned.DefaultRetention {
		t.Fatalf("defaults: %+v", s)
	}
	for _, err := range []error{
		s.SetPoolWait(time.Millisecond), s.SetKeepalive(pinned.MinKeepalive), s.SetRequestTimeout(time.Second),
		s.SetCleanupInterval(0), s.SetCleanupBatch(1), s.SetRetention(time.Minute),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if s.PoolWait != time.Millisecond || s.Keepalive != pinned.MinKeepalive || s.RequestTimeout != time.Second ||
		s.CleanupInterval != 0 || s.CleanupBatch != 1 || s.Retention != time.Minute {
		t.Fatalf("after the setters: %+v", s)
	}
}

func TestApply(t *testing.T) {
	type opt func(*pinned.Settings) error
	defaults := pinned.NewSettings(pinned.Spec{Name: "x", Keepalive: time.Second})
	s, err := pinned.Apply(defaults, []opt{
		func(s *pinned.Settings) error { return s.SetCleanupBatch(7) },
		func(s *pinned.Settings) error { return s.SetCleanupBatch(9) },
	})
	if err != nil || s.CleanupBatch != 9 {
		t.Fatalf("got %+v, %v; want the last batch, 9", s, err)
	}
	s, err = pinned.Apply(defaults, []opt{
		func(s *pinned.Settings) error { return s.SetCleanupBatch(7) },
		func(s *pinned.Settings) error { return s.SetCleanupBatch(0) },
	})
	if !errors.Is(err, driver.ErrInvalidOption) || s != (pinned.Settings{}) {
		t.Fatalf("got %+v, %v; want no settings and the error", s, err)
	}
}
