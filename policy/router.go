package policy

import (
	"fmt"
	"maps"

	"github.com/distlock/distlock"
)

// Router picks the client of a key's group, for groups kept on different
// stores: a distlock.Client has one backend. Give each client its own Policy
// over the same Config, so that each measures its own store.
type Router struct {
	p        *Policy
	clients  map[string]*distlock.Client
	fallback *distlock.Client
}

// NewRouter returns a router that sends the keys of each group in byGroup to
// its client and every other key to fallback. p decides the groups; a name it
// does not define is an error, as is a nil client.
func NewRouter(p *Policy, fallback *distlock.Client, byGroup map[string]*distlock.Client) (*Router, error) {
	if fallback == nil {
		return nil, fmt.Errorf("policy: router: nil fallback client")
	}
	for name, c := range byGroup {
		if _, ok := p.groups[name]; !ok {
			return nil, fmt.Errorf("policy: router: no group %q in the config", name)
		}
		if c == nil {
			return nil, fmt.Errorf("policy: router: group %q: nil client", name)
		}
	}
	return &Router{p: p, clients: maps.Clone(byGroup), fallback: fallback}, nil
}

// Client returns the client for key.
func (r *Router) Client(key string) *distlock.Client {
	if c, ok := r.clients[r.p.Group(key)]; ok {
		return c
	}
	return r.fallback
}
