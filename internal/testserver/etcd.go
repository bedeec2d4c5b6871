package testserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Etcd starts a single-member etcd server. Its client URL is
// EtcdEndpoint(s).
func Etcd(t testing.TB) *Server {
	t.Helper()
	return EtcdCluster(t, 1)[0]
}

// EtcdCluster starts an etcd cluster of n members on loopback and waits until
// every member reports healthy.
func EtcdCluster(t testing.TB, n int) []*Server {
	t.Helper()
	bin := lookBinary(t, "etcd-server", "etcd")
	dir := memDir(t, "etcd")
	peers := make([]string, n)
	initial := make([]string, n)
	for i := range n {
		peers[i] = fmt.Sprintf("http://%s:%d", Host, FreePort(t))
		initial[i] = fmt.Sprintf("m%d=%s", i, peers[i])
	}
	starting := n > 1 // until all members run, a member cannot be healthy alone
	members := make([]*Server, n)
	for i := range n {
		s := &Server{Name: fmt.Sprintf("etcd-m%d", i), Port: FreePort(t), Dir: filepath.Join(dir, strconv.Itoa(i))}
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			t.Fatalf("testserver: %v", err)
		}
		client := EtcdEndpoint(s)
		s.command = func() *exec.Cmd {
			return exec.Command(bin, "--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(s.Dir, "data"),
				"--listen-client-urls", client, "--advertise-client-urls", client,
				"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
				"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
				"--initial-cluster-token", filepath.Base(dir), "--logger", "zap", "--log-level", "warn", "--enable-pprof",
				"--heartbeat-interval", "50", "--election-timeout", "500")
		}
		s.ready = func(ctx context.Context) error {
			if starting {
				return dialReady(ctx, s.Addr())
			}
			return etcdHealthy(ctx, client)
		}
		members[i] = newServer(t, s)
	}
	starting = false
	awaitHealthy(t, members, func(s *Server) error { return etcdHealthy(context.Background(), EtcdEndpoint(s)) })
	return members
}

// EtcdEndpoint returns the client URL of an etcd member.
func EtcdEndpoint(s *Server) string { return "http://" + s.Addr() }

func etcdHealthy(ctx context.Context, client string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, client+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("health: %s %s", resp.Status, body)
	}
	return nil
}
