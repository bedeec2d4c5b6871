package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	"github.com/distlock/distlock/driver"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// pageCounter is a store that counts its listings.
type pageCounter struct {
	*memlock.Backend
	mu     sync.Mutex
	lists  int
	limits []int // of each ListPage
}

func (p *pageCounter) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	p.mu.Lock()
	p.lists++
	p.mu.Unlock()
	return p.Backend.List(ctx, prefix)
}

func (p *pageCounter) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	p.mu.Lock()
	p.limits = append(p.limits, limit)
	p.mu.Unlock()
	return p.Backend.ListPage(ctx, prefix, after, limit)
}

// reads returns the listings since the last call: List calls, and the
// limit of each ListPage.
func (p *pageCounter) reads() (lists int, limits []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lists, limits = p.lists, p.limits
	p.lists, p.limits = 0, nil
	return lists, limits
}

// List reads the store a page at a time, one lock more than the page to
// know whether another follows, never the whole namespace. Across tenants,
// where the prefix is each tenant's and the store cannot match it, it reads
// pages of the store until the caller's page is full.
func TestListReadsPagesOfTheStore(t *testing.T) {
	store := &pageCounter{Backend: memlock.New()}
	e := newEnvClient(t, distlock.New(store), server.Limits{PageSize: 5, MaxPageSize: 10})
	hold := func(api distlockv1connect.LockServiceClient, format string, n int) {
		for i := range n {
			acquire(t, api, &distlockv1.AcquireRequest{Key: fmt.Sprintf(format, i), Lease: durationpb.New(time.Minute)})
		}
	}
	alpha := e.api(alphaClient)
	hold(alpha, "k%02d", 12)
	hold(alpha, "z%02d", 4)
	hold(e.api(betaClient), "k%02d", 3)
	store.reads()

	type page struct {
		keys  []string
		token bool
	}
	pages := func(api distlockv1connect.LockServiceClient, req *distlockv1.ListRequest) []page {
		t.Helper()
		var out []page
		for range 10 {
			res, err := api.List(ctx(t), connect.NewRequest(req))
			if err != nil {
				t.Fatal(err)
			}
			p := page{token: res.Msg.GetNextPageToken() != ""}
			for _, l := range res.Msg.GetLocks() {
				p.keys = append(p.keys, l.GetTenant()+":"+l.GetKey())
			}
			out = append(out, p)
			if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
				break
			}
		}
		return out
	}
	equal := func(a, b page) bool { return a.token == b.token && slices.Equal(a.keys, b.keys) }

	got := pages(alpha, &distlockv1.ListRequest{Prefix: "k"})
	want := []page{
		{[]string{":k00", ":k01", ":k02", ":k03", ":k04"}, true},
		{[]string{":k05", ":k06", ":k07", ":k08", ":k09"}, true},
		{[]string{":k10", ":k11"}, false},
	}
	if !slices.EqualFunc(got, want, equal) {
		t.Errorf("alpha's k pages: %v, want %v", got, want)
	}
	if lists, limits := store.reads(); lists != 0 || !slices.Equal(limits, []int{6, 6, 6}) {
		t.Errorf("the pages read the store with %d Lists and ListPages of %v; want no List, and a ListPage of 6 a page", lists, limits)
	}

	got = pages(e.api(opsAdmin), &distlockv1.ListRequest{Prefix: "z", AllTenants: true, PageSize: 2})
	want = []page{{[]string{"alpha:z00", "alpha:z01"}, true}, {[]string{"alpha:z02", "alpha:z03"}, false}}
	if !slices.EqualFunc(got, want, equal) {
		t.Errorf("every tenant's z pages of 2: %v, want %v", got, want)
	}
	// The first page reads alpha's 12 k keys and its z keys, 3 at a time;
	// the second starts after z01 and reads the rest with beta's.
	if lists, limits := store.reads(); lists != 0 || !slices.Equal(limits, []int{3, 3, 3, 3, 3, 3, 3}) {
		t.Errorf("the pages across tenants read the store with %d Lists and ListPages of %v; want no List, and ListPages of 3", lists, limits)
	}
}
