package cli

import (
	"slices"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

// TestEveryStoreHasItsTools: with every backend and tool package imported,
// as the binary has them, each scheme distlock.Open knows has doctor
// checks or says why it has none, a bench floor or says why it has none,
// and a migration or says why it keeps no schema; and no tool knows a
// scheme Open does not.
func TestEveryStoreHasItsTools(t *testing.T) {
	open := distlock.Schemes()
	for _, tool := range []struct {
		name     string
		has      []string
		declined map[string]string
	}{
		{"doctor", doctor.Schemes(), doctor.Declined()},
		{"floor", floor.Schemes(), floor.Declined()},
		{"migration", migrate.Schemes(), migrate.Declined()},
	} {
		for _, s := range open {
			if !slices.Contains(tool.has, s) && tool.declined[s] == "" {
				t.Errorf("%s:// has no %s and does not say why: register one in its backend's tool package, or declare it has none", s, tool.name)
			}
		}
		for _, s := range tool.has {
			if !slices.Contains(open, s) {
				t.Errorf("the %s knows %s://, which distlock.Open does not", tool.name, s)
			}
		}
		for s := range tool.declined {
			if !slices.Contains(open, s) {
				t.Errorf("the %s declines %s://, which distlock.Open does not know", tool.name, s)
			}
		}
	}
}
