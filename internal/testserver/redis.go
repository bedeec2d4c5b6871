package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Redis starts a redis-server without persistence (RDB and AOF off), with
// the DEBUG command enabled for loopback clients. Extra arguments are passed
// to redis-server (for example "--appendonly", "yes").
func Redis(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := lookBinary(t, "redis-server", "redis-server")
	s := &Server{Name: "redis", Port: FreePort(t), Dir: tempDir(t, "redis")}
	s.command = func() *exec.Cmd {
		base := []string{"--port", strconv.Itoa(s.Port), "--bind", Host, "--dir", s.Dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--enable-debug-command", "local",
			"--repl-diskless-sync-delay", "0"}
		return exec.Command(bin, append(base, args...)...)
	}
	s.ready = func(ctx context.Context) error {
		reply, err := RedisCommand(ctx, s.Addr(), "PING")
		if err == nil && reply != "PONG" {
			err = fmt.Errorf("PING answered %q", reply)
		}
		return err
	}
	return newServer(t, s)
}

// RedisCommand sends one command to the Redis server at addr on a new
// connection and returns its reply: simple and bulk strings as is, integers
// in decimal, arrays as their elements joined by newlines. An error reply is
// returned as an error.
func RedisCommand(ctx context.Context, addr string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

// RedisCPU returns the CPU time, user and system, that the Redis server at
// addr has used, from INFO cpu.
func RedisCPU(ctx context.Context, addr string) (time.Duration, error) {
	info, err := RedisCommand(ctx, addr, "INFO", "cpu")
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for line := range strings.SplitSeq(info, "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			seconds, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu: %s: %w", line, err)
			}
			total += time.Duration(seconds * float64(time.Second))
		}
	}
	return total, nil
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	body := line[1:]
	switch line[0] {
	case '+', ':':
		return body, nil
	case '-':
		return "", errors.New(body)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
