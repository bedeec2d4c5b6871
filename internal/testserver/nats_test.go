package testserver

import (
	"context"
	"strings"
	"testing"
)

// TestNATS: the server answers JetStream's health check once ready, and
// again after a restart on its own directory.
func TestNATS(t *testing.T) {
	t.Parallel()
	s := NATS(t)
	if !strings.HasPrefix(NATSURL(s), "nats://"+Host+":") {
		t.Fatalf("NATSURL = %q", NATSURL(s))
	}
	s.Restart()
	if err := s.ready(context.Background()); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}
