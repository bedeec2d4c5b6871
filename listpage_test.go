package distlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
)

// listOnly is a backend that lists but cannot list a page.
type listOnly struct {
	driver.Backend
	driver.Lister
	lists int
}

func (l *listOnly) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	l.lists++
	return l.Lister.List(ctx, prefix)
}

// pageSpy is a backend that lists pages, and records what it was asked.
type pageSpy struct {
	*memlock.Backend
	asked []string
}

func (p *pageSpy) List(context.Context, string) ([]driver.Info, error) {
	return nil, errors.New("List called where ListPage was due")
}

func (p *pageSpy) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	p.asked = append(p.asked, prefix+"|"+after)
	infos, err := p.Backend.List(ctx, prefix) // sorted by key
	infos = slices.DeleteFunc(infos, func(i driver.Info) bool { return i.Key <= after })
	return infos[:min(len(infos), limit)], err
}

// ListPage asks a driver.PageLister for the page, and otherwise cuts the
// page out of List in byte order; bad input reaches no store.
func TestListPage(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	holder := distlock.New(store)
	defer holder.Close()
	for _, k := range []string{"p/é", "p/a", "p/B", "p/b", "q/a"} {
		if _, err := holder.TryLock(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	other := store.Connect()
	lo := &listOnly{Backend: other, Lister: other}
	spy := &pageSpy{Backend: store.Connect()}
	for name, c := range map[string]*distlock.Client{"fallback": distlock.New(lo), "PageLister": distlock.New(spy)} {
		var pages [][]string
		after := ""
		for range 4 {
			infos, err := c.ListPage(ctx, "p/", after, 2)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var keys []string
			for _, in := range infos {
				keys = append(keys, in.Key)
			}
			pages = append(pages, keys)
			if len(keys) < 2 {
				break
			}
			after = keys[len(keys)-1]
		}
		if want := [][]string{{"p/B", "p/a"}, {"p/b", "p/é"}, nil}; !slices.EqualFunc(pages, want, slices.Equal) {
			t.Errorf("%s: pages %q, want %q", name, pages, want)
		}
		for _, bad := range []struct {
			prefix, after string
			limit         int
			want          error
		}{
			{"p/\n", "", 1, distlock.ErrInvalidKey},
			{"p/", "p/\x7f", 1, distlock.ErrInvalidKey},
			{"p/", strings.Repeat("p", distlock.MaxKeyLen+1), 1, distlock.ErrInvalidKey},
			{"p/", "", 0, distlock.ErrInvalidOption},
			{"p/", "", -1, distlock.ErrInvalidOption},
		} {
			if _, err := c.ListPage(ctx, bad.prefix, bad.after, bad.limit); !errors.Is(err, bad.want) {
				t.Errorf("%s: ListPage(%q, %q, %d): %v, want %v", name, bad.prefix, bad.after, bad.limit, err, bad.want)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if lo.lists != 3 || !slices.Equal(spy.asked, []string{"p/|", "p/|p/a", "p/|p/é"}) {
		t.Errorf("the fallback listed %d times, want 3; the PageLister was asked %q", lo.lists, spy.asked)
	}
	none := distlock.New(struct{ driver.Backend }{store.Connect()})
	defer none.Close()
	if _, err := none.ListPage(ctx, "p/", "", 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ListPage on a backend that cannot list: %v, want errors.ErrUnsupported", err)
	}
}
