package floor

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// nopTarget takes every key.
type nopTarget struct{ cfg Config }

func (nopTarget) Lock(context.Context, int, string) (func(context.Context) error, error) {
	return func(context.Context) error { return nil }, nil
}

func (nopTarget) Close() error { return nil }

// The schemes the tests register; real stores register from their tool
// packages.
func init() {
	Register("floortest", func(_ context.Context, u *url.URL, cfg Config) (Target, error) {
		if u.Host == "down" {
			return nil, errors.New("refused")
		}
		return nopTarget{cfg}, nil
	})
	None("floortest-none", "no floor in a test")
}

func TestOpen(t *testing.T) {
	f, err := Open(context.Background(), "floortest://up", Config{Workers: 3, Clients: 2})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := f.(nopTarget); !ok || n.cfg.Workers != 3 {
		t.Errorf("Open gave %#v", f)
	}
	_, err = Open(context.Background(), "floortest://user:secret@down", Config{})
	if err == nil || !strings.Contains(err.Error(), "floortest://user:xxxxx@down: refused") || strings.Contains(err.Error(), "secret") {
		t.Errorf("a floor that fails to open: %v", err)
	}
}

func TestKnown(t *testing.T) {
	if err := Known("floortest://x"); err != nil {
		t.Errorf("a registered floor: %v", err)
	}
	for u, says := range map[string]string{
		"%zz":               "is not a URL",
		"nope://x":          `"nope://" (the floor is known for floortest)`,
		"floortest-none://": `"floortest-none://": no floor in a test`,
	} {
		if err := Known(u); !errors.Is(err, ErrNoFloor) || !strings.Contains(err.Error(), says) {
			t.Errorf("Known(%q) = %v, want ErrNoFloor saying %q", u, err, says)
		}
		if _, err := Open(context.Background(), u, Config{}); !errors.Is(err, ErrNoFloor) {
			t.Errorf("Open(%q) = %v, want ErrNoFloor", u, err)
		}
	}
	if !slices.Equal(Schemes(), []string{"floortest"}) || Declined()["floortest-none"] == "" {
		t.Errorf("Schemes() = %v, Declined() = %v", Schemes(), Declined())
	}
}

func TestTokens(t *testing.T) {
	tok := Tokens(3)
	if len(tok) != 3 || tok[0] == tok[1] || tok[1] == tok[2] || tok[0] == tok[2] {
		t.Errorf("Tokens(3) = %q", tok)
	}
}
