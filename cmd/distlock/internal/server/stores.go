package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/distlock/distlock"
)

// Route sends the store keys under Prefix to a store of their own.
type Route struct {
	// Prefix is a prefix of store keys: "tenants/<tenant>/" sends a
	// tenant's locks, "tenants/<tenant>/<key prefix>" some of them,
	// "sessions/<tenant>/" its sessions.
	Prefix string
	// Client is the store. The caller builds it and closes it after the
	// server has stopped.
	Client *distlock.Client
}

// stores routes each store key to one client: the client of the longest
// route prefix the key starts with, else the default. A key lives in one
// store, so exclusion and fences hold as in one store; calls over many keys
// (List, ListPage, WatchPrefix) ask every store that may hold one and keep,
// of each store's answer, the keys routed to that store.
type stores struct {
	fallback *distlock.Client
	routes   []Route // longest prefix first
}

// newStores checks routes and returns their router over fallback.
func newStores(fallback *distlock.Client, routes []Route) (*stores, error) {
	st := &stores{fallback: fallback, routes: slices.Clone(routes)}
	seen := map[string]bool{}
	for _, r := range st.routes {
		switch {
		case r.Prefix == "":
			return nil, errors.New("server: a route has no prefix: the default store is Config.Client")
		case r.Client == nil:
			return nil, fmt.Errorf("server: route %q has a nil client", r.Prefix)
		case seen[r.Prefix]:
			return nil, fmt.Errorf("server: prefix %q is routed twice", r.Prefix)
		}
		seen[r.Prefix] = true
	}
	slices.SortFunc(st.routes, func(a, b Route) int { return cmp.Compare(len(b.Prefix), len(a.Prefix)) })
	return st, nil
}

// of returns the client of store key k.
func (st *stores) of(k string) *distlock.Client {
	for _, r := range st.routes {
		if strings.HasPrefix(k, r.Prefix) {
			return r.Client
		}
	}
	return st.fallback
}

// all returns every client, each once.
func (st *stores) all() []*distlock.Client {
	cs := []*distlock.Client{st.fallback}
	for _, r := range st.routes {
		if !slices.Contains(cs, r.Client) {
			cs = append(cs, r.Client)
		}
	}
	return cs
}

// under returns the clients that may hold keys under prefix, each once:
// the client of prefix itself, and those of the routes inside it.
func (st *stores) under(prefix string) []*distlock.Client {
	cs := []*distlock.Client{st.of(prefix)}
	for _, r := range st.routes {
		if strings.HasPrefix(r.Prefix, prefix) && !slices.Contains(cs, r.Client) {
			cs = append(cs, r.Client)
		}
	}
	return cs
}

// owned drops from infos, which c listed, the keys routed to another store
// (left there from before a route was set: the service cannot reach them).
func (st *stores) owned(c *distlock.Client, infos []distlock.Info) []distlock.Info {
	if len(st.routes) == 0 {
		return infos
	}
	return slices.DeleteFunc(infos, func(i distlock.Info) bool { return st.of(i.Key) != c })
}

// List lists the held locks under prefix in every store that may have one.
func (st *stores) List(ctx context.Context, prefix string) ([]distlock.Info, error) {
	var all []distlock.Info
	for _, c := range st.under(prefix) {
		infos, err := c.List(ctx, prefix)
		if err != nil {
			return nil, err
		}
		all = append(all, st.owned(c, infos)...)
	}
	return all, nil
}

// ListPage is distlock.Client.ListPage over every store that may hold a key
// under prefix: the first limit keys after after, in key order, of their
// pages merged.
func (st *stores) ListPage(ctx context.Context, prefix, after string, limit int) ([]distlock.Info, error) {
	cs := st.under(prefix)
	if len(cs) == 1 && len(st.routes) == 0 {
		return cs[0].ListPage(ctx, prefix, after, limit)
	}
	var all []distlock.Info
	for _, c := range cs {
		page, err := st.ownedPage(ctx, c, prefix, after, limit)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
	}
	slices.SortFunc(all, func(a, b distlock.Info) int { return strings.Compare(a.Key, b.Key) })
	return all[:min(len(all), limit)], nil
}

// ownedPage is c's page, of keys routed to c only: when it dropped some of
// a full page, it reads on, so that a short page still means the last.
func (st *stores) ownedPage(ctx context.Context, c *distlock.Client, prefix, after string, limit int) ([]distlock.Info, error) {
	var kept []distlock.Info
	for {
		page, err := c.ListPage(ctx, prefix, after, limit-len(kept))
		if err != nil {
			return nil, err
		}
		full := len(page) == limit-len(kept)
		if full {
			after = page[len(page)-1].Key
		}
		kept = append(kept, st.owned(c, page)...)
		if !full || len(kept) == limit {
			return kept, nil
		}
	}
}

// WatchPrefix is distlock.Client.WatchPrefix over every store that may hold
// a key under prefix, their notices merged. When one store's watch ends,
// they all end and the channel closes: the caller watches again. It fails
// if any store cannot watch.
func (st *stores) WatchPrefix(ctx context.Context, prefix string) (<-chan []string, error) {
	cs := st.under(prefix)
	if len(cs) == 1 && len(st.routes) == 0 {
		return cs[0].WatchPrefix(ctx, prefix)
	}
	ctx, cancel := context.WithCancel(ctx)
	ins := make([]<-chan []string, len(cs))
	for i, c := range cs {
		ch, err := c.WatchPrefix(ctx, prefix)
		if err != nil {
			cancel()
			return nil, err
		}
		ins[i] = ch
	}
	return st.merge(ctx, cancel, cs, ins), nil
}

// merge feeds the notices of ins, each of cs's watch, to one channel, until
// one ends; it then calls cancel, which ends the others, and closes the
// channel.
func (st *stores) merge(ctx context.Context, cancel context.CancelFunc, cs []*distlock.Client, ins []<-chan []string) <-chan []string {
	out := make(chan []string)
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Go(func() {
			defer cancel()
			for keys := range in {
				if keys = st.ownedKeys(cs[i], keys); keys == nil {
					continue
				}
				select {
				case out <- keys:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

// ownedKeys drops from a notice of c the keys routed to another store. An
// empty notice (notices may have been lost) stays empty; one left with no
// key is nil.
func (st *stores) ownedKeys(c *distlock.Client, keys []string) []string {
	if len(keys) == 0 {
		return []string{}
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return st.of(k) != c })
	if len(keys) == 0 {
		return nil
	}
	return keys
}
