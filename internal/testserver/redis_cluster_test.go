package testserver

import (
	"context"
	"strings"
	"testing"
)

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	c := RedisCluster(t, 3)
	ctx := context.Background()
	for _, n := range c.Nodes {
		reply, err := RedisCommand(ctx, n.Addr(), "CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(reply, "cluster_known_nodes:3") || !strings.Contains(reply, "cluster_slots_assigned:16384") {
			t.Fatalf("%s: CLUSTER INFO = %q, want 3 nodes and all slots", n.Name, reply)
		}
	}
	// A key lives on exactly one master: the others redirect.
	moved := 0
	for _, n := range c.Nodes {
		if _, err := RedisCommand(ctx, n.Addr(), "SET", "{k}", "v"); err != nil && strings.HasPrefix(err.Error(), "MOVED") {
			moved++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if moved != 2 {
		t.Fatalf("%d nodes redirected a write, want 2", moved)
	}
}
