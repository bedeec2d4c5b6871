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

// natsTool is where `make deps` (scripts/deps.sh) puts the nats-server it
// builds from the server's Go module, relative to the repository root.
var natsTool = filepath.Join("bin", "tools", "nats-server")

// NATS starts a nats-server with JetStream on, keeping its streams in files
// under its directory, so that they survive a restart or a kill. Its client
// URL is NATSURL(s).
func NATS(t testing.TB) *Server {
	t.Helper()
	return NATSCluster(t, 1)[0]
}

// NATSCluster starts n nats-servers with JetStream on and file storage,
// routed into one cluster when n > 1, and waits until each reports
// JetStream healthy (for a cluster: a meta leader elected and the server
// current). Member i's server_name is "n<i>", the name JetStream gives its
// stream leaders; its Server's Name is "nats-n<i>".
func NATSCluster(t testing.TB, n int) []*Server {
	t.Helper()
	bin := findNATS(t)
	dir := tempDir(t, "nats")
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats-route://%s:%d", Host, FreePort(t))
	}
	starting := n > 1 // until all members run, a member cannot be healthy alone
	members := make([]*Server, n)
	for i := range n {
		s := &Server{Name: fmt.Sprintf("nats-n%d", i), Port: FreePort(t), Dir: filepath.Join(dir, strconv.Itoa(i))}
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			t.Fatalf("testserver: %v", err)
		}
		monitor := FreePort(t)
		conf := filepath.Join(s.Dir, "nats.conf")
		if err := os.WriteFile(conf, []byte(natsConfig(s, i, monitor, routes)), 0o644); err != nil {
			t.Fatalf("testserver: %v", err)
		}
		s.command = func() *exec.Cmd { return exec.Command(bin, "-c", conf) }
		health := fmt.Sprintf("http://%s:%d/healthz", Host, monitor)
		s.ready = func(ctx context.Context) error {
			if starting {
				return dialReady(ctx, s.Addr())
			}
			return natsHealthy(ctx, health)
		}
		members[i] = newServer(t, s)
	}
	starting = false
	awaitHealthy(t, members, func(s *Server) error { return s.ready(context.Background()) })
	return members
}

// natsConfig is the configuration of member i of a cluster whose route
// URLs are routes (no cluster block for one member).
func natsConfig(s *Server, i, monitor int, routes []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %q\nhttp: %q\nserver_name: \"n%d\"\n", s.Addr(), fmt.Sprintf("%s:%d", Host, monitor), i)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n}\n", filepath.Join(s.Dir, "jetstream"))
	if len(routes) > 1 {
		listen := strings.TrimPrefix(routes[i], "nats-route://")
		fmt.Fprintf(&b, "cluster {\n  name: \"distlock-test\"\n  listen: %q\n  routes: [%s]\n}\n", listen, quoteAll(routes))
	}
	return b.String()
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// NATSURL returns the nats:// URL of the servers, without a bucket.
func NATSURL(servers ...*Server) string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return "nats://" + strings.Join(addrs, ",")
}

// natsHealthy asks the monitoring endpoint whether the server and its
// JetStream are healthy.
func natsHealthy(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s %s", resp.Status, body)
	}
	return nil
}

// findNATS returns the nats-server on PATH, or the one `make deps` built
// in the nearest directory, from the working directory up, that has it;
// or fails (skips under -short) saying how to build it.
func findNATS(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	for {
		p := filepath.Join(dir, natsTool)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		up := filepath.Dir(dir)
		if up == dir {
			break
		}
		dir = up
	}
	msg := "testserver: nats-server not found on PATH nor at " + natsTool + " in this directory or above; build it with `make deps`"
	if testing.Short() {
		t.Skip(msg)
	}
	t.Fatal(msg)
	return ""
}
