package testserver

import (
	"context"
	"os"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// TestShared: tests asking for one name get one server, which outlives the
// test that started it; its directory stays until Main ends.
func TestShared(t *testing.T) {
	var first *Server
	t.Run("starts", func(t *testing.T) {
		first = Shared(t, "redis", func(t testing.TB) *Server { return Redis(t) })
		if _, err := RedisCommand(context.Background(), first.Addr(), "SET", "shared", "1"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("shares", func(t *testing.T) {
		s := Shared(t, "redis", func(t testing.TB) *Server {
			t.Fatal("started a second server")
			return nil
		})
		if s != first {
			t.Fatalf("got the server on %s, want the shared one on %s", s.Addr(), first.Addr())
		}
		if v, err := RedisCommand(context.Background(), s.Addr(), "GET", "shared"); err != nil || v != "1" {
			t.Fatalf("GET on the shared server after its first test ended: %q, %v", v, err)
		}
		if _, err := os.Stat(s.Dir); err != nil {
			t.Fatalf("the shared server's directory went with its first test: %v", err)
		}
	})
}
