package server

import (
	"fmt"
	"sync"

	"connectrpc.com/connect"
)

// tenantCaps counts what each tenant keeps open of one kind (waits,
// streams) against a cap, so that one tenant cannot take the memory and the
// store's time that the others need.
type tenantCaps struct {
	what string // "waiting Acquire calls", "Watch streams"
	max  int

	mu   sync.Mutex
	open map[string]int // by tenant; a tenant with none has no entry
}

// take counts one more for tenant and returns the function that counts it
// off, or ResourceExhausted naming the cap if tenant is at it.
func (c *tenantCaps) take(tenant string) (done func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[tenant] >= c.max {
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("tenant %q has %d %s open, the most a tenant may", tenant, c.max, c.what))
	}
	if c.open == nil {
		c.open = make(map[string]int)
	}
	c.open[tenant]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.open[tenant]--; c.open[tenant] == 0 {
			delete(c.open, tenant)
		}
	}, nil
}
