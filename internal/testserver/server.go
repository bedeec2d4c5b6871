// Package testserver starts real store servers (redis-server, PostgreSQL,
// etcd, ZooKeeper, MariaDB, dynalite for DynamoDB, nats-server with
// JetStream) on free loopback ports
// for tests, waits until each is ready, and stops it when the test ends. A
// server can be stopped, restarted, killed or paused (SIGSTOP) for fault
// tests, and run under a FakeClock whose wall clock the test steps or
// speeds up.
//
// A missing server binary fails the test with the Debian package to install,
// unless the test runs with -short, where it is skipped.
package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Host is the only address servers listen on.
const Host = "127.0.0.1"

// Server is one running store process.
type Server struct {
	Name string
	// Port is the client port on Host.
	Port int
	// Dir is the server's private directory (data, config, log).
	Dir string

	t       testing.TB
	command func() *exec.Cmd
	ready   func(ctx context.Context) error
	stopSig os.Signal
	clock   *FakeClock // the wall clock the process reads, nil for the true one

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort(Host, strconv.Itoa(s.Port)) }

// LogPath returns the file that collects the server's output.
func (s *Server) LogPath() string { return filepath.Join(s.Dir, "server.log") }

// Start starts the server (again) on the same port and directory and waits
// until it is ready.
func (s *Server) Start() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("testserver: %s: %v", s.Name, err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return errors.New("already running")
	}
	log, err := os.OpenFile(s.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	cmd := s.command()
	if s.clock != nil {
		cmd.Env = s.clock.environ(cmd.Env)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		_ = log.Close()
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = log.Close()
		close(exited)
	}()
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		err := s.ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			s.mu.Lock()
			s.cmd = nil
			s.mu.Unlock()
			return fmt.Errorf("exited before it was ready (%v); log:\n%s", err, s.logTail())
		case <-ctx.Done():
			s.Kill()
			return fmt.Errorf("not ready after 60s (%v); log:\n%s", err, s.logTail())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.LogPath())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Stop stops the server gracefully (killing it after 10s) and waits for it
// to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() { s.signalAndWait(s.stopSig, 10*time.Second) }

// Kill stops the server with SIGKILL, as a crash would.
func (s *Server) Kill() { s.signalAndWait(syscall.SIGKILL, 0) }

// Restart stops the server gracefully and starts it again on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.Start()
}

func (s *Server) signalAndWait(sig os.Signal, grace time.Duration) {
	s.mu.Lock()
	cmd, exited, paused := s.cmd, s.exited, s.paused
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	if paused {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	}
	_ = cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-exited:
			return
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Pause freezes the server with SIGSTOP: it keeps its connections but
// answers nothing until Resume.
func (s *Server) Pause() { s.sendSignal(syscall.SIGSTOP, true) }

// Resume continues a paused server.
func (s *Server) Resume() { s.sendSignal(syscall.SIGCONT, false) }

func (s *Server) sendSignal(sig syscall.Signal, paused bool) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("testserver: %s is not running", s.Name)
	}
	if err := syscall.Kill(-s.cmd.Process.Pid, sig); err != nil {
		s.t.Fatalf("testserver: signal %s: %v", s.Name, err)
	}
	s.paused = paused
}

// newServer registers cleanup and starts the server.
func newServer(t testing.TB, s *Server) *Server {
	t.Helper()
	s.t = t
	if c, ok := t.(clockTB); ok {
		s.clock = c.clock
	}
	if s.stopSig == nil {
		s.stopSig = syscall.SIGTERM
	}
	t.Cleanup(func() {
		if t.Failed() && s.crashed() {
			t.Logf("testserver: %s exited by itself during the test; log:\n%s", s.Name, s.logTail())
		}
		s.Kill()
	})
	s.Start()
	return s
}

// crashed reports whether the server, started and not stopped since, has
// exited.
func (s *Server) crashed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// lookBinary returns the path of a server binary, or fails (skips under
// -short) with the package that provides it.
func lookBinary(t testing.TB, pkg string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if filepath.IsAbs(n) {
			if _, err := os.Stat(n); err == nil {
				return n
			}
			continue
		}
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("testserver: %s not found; install it with `sudo apt-get install -y %s` or `make deps`", names[0], pkg)
	if testing.Short() {
		t.Skip(msg)
	}
	t.Fatal(msg)
	return ""
}

// FreePort returns a TCP port on Host that was free a moment ago and that
// no earlier call of this process returned.
//
// It picks below the kernel's ephemeral range (ip_local_port_range), from
// which the kernel takes the source port of every outgoing connection and
// every bind to port 0: a port from that range, freed and then handed to a
// server, can be taken meanwhile by any client connection of the tests.
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := portRange()
	for range 200 {
		p := lo + rand.IntN(hi-lo)
		if portsGiven[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(Host, strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		portsGiven[p] = true
		return p
	}
	t.Fatalf("testserver: no free port in %d-%d after 200 tries", lo, hi)
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = make(map[int]bool)
)

// portRange is where FreePort picks: the 12 000 ports below the kernel's
// ephemeral range (20 000-32 767 with Linux's default range).
func portRange() (lo, hi int) {
	ephemeralLow := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 12000+1024 {
				ephemeralLow = n
			}
		}
	}
	return ephemeralLow - 12000, ephemeralLow
}

// awaitHealthy waits until healthy reports each member of a cluster
// healthy, 60 s for them all, and fails t with the log of the first that
// is not.
func awaitHealthy(t testing.TB, members []*Server, healthy func(*Server) error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, s := range members {
		for {
			err := healthy(s)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testserver: %s not healthy: %v; log:\n%s", s.Name, err, s.logTail())
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
}

// tempDir returns a fresh directory that is removed when the test ends. It
// lives directly under the system temp dir (short paths for unix sockets) and
// is world-traversable so that servers running as another user can reach it.
func tempDir(t testing.TB, prefix string) string {
	t.Helper()
	return tempDirIn(t, "", prefix)
}

// memDir is tempDir in memory (/dev/shm), where the machine has it, for a
// store that syncs its log to disk on every write and cannot be told not
// to (etcd 3.4): a disk that takes seconds over a sync now and then would
// stall the tests that long. The data still outlives a restart of the
// server, which is all a test asks of it.
func memDir(t testing.TB, prefix string) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return tempDirIn(t, "/dev/shm", prefix)
	}
	return tempDir(t, prefix)
}

// tempDirIn is tempDir under parent ("" for the system temp dir).
func tempDirIn(t testing.TB, parent, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp(parent, "dl-"+prefix+"-")
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// dialReady reports whether something accepts TCP connections on addr.
func dialReady(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// exchange sends req on a new connection to addr and returns what the server
// answered before closing or within 2s.
func exchange(ctx context.Context, addr string, req []byte, want []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	if _, err := c.Write(req); err != nil {
		return err
	}
	buf := make([]byte, 0, 512)
	tmp := make([]byte, 512)
	for !bytes.Contains(buf, want) {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			return fmt.Errorf("got %q: %w", buf, err)
		}
	}
	return nil
}

// run runs a helper command and returns its combined output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %v: %w: %s", name, args, err, out)
	}
	return string(out), nil
}
