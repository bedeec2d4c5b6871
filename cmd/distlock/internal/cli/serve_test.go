package cli

// Tests of distlock serve. Each service runs in a process of its own (this
// test binary, re-run as TestServeHelperProcess), so that signals, restarts
// and exit codes are real; clients speak Connect's JSON over HTTP, as curl
// does, on loopback.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serveHelperEnv marks a child process that runs serve.
const serveHelperEnv = "DISTLOCK_SERVE_HELPER"

// TestServeHelperProcess is no test: the serve tests run this binary with
// -test.run=^TestServeHelperProcess$ and serveHelperEnv set, and the
// arguments after "--" are distlock's.
func TestServeHelperProcess(t *testing.T) {
	if os.Getenv(serveHelperEnv) != "1" {
		t.Skip("a child process of the serve tests")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Exit(Main(args, os.Stdin, os.Stdout, os.Stderr))
}

// serveProc is a running distlock serve.
type serveProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	code   int
	banner bannerView
}

// syncBuffer is a bytes.Buffer safe for a writer and readers at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveCommandLine returns the child process command for distlock args.
func serveCommandLine(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestServeHelperProcess$", "--"}, args...)...)
	cmd.Env = append(append(os.Environ(), serveHelperEnv+"=1", "GORACE=atexit_sleep_ms=0"), env...)
	return cmd
}

// startServe starts distlock serve -o json with args and waits for its
// banner. The process is killed when the test ends, if it still runs.
func startServe(t testing.TB, env []string, args ...string) *serveProc {
	t.Helper()
	return startServeCmd(t, serveCommandLine(env, append([]string{"serve", "-o", "json"}, args...)...), args)
}

// startServeCmd starts cmd, a distlock serve -o json with args, and waits
// for its banner, as startServe does.
func startServeCmd(t testing.TB, cmd *exec.Cmd, args []string) *serveProc {
	t.Helper()
	p := &serveProc{t: t, stderr: &syncBuffer{}, done: make(chan struct{}), cmd: cmd}
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start serve: %v", err)
	}
	banner := make(chan bannerView, 1)
	go func() {
		dec := json.NewDecoder(bufio.NewReader(out))
		var v bannerView
		if dec.Decode(&v) == nil {
			banner <- v
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		err := p.cmd.Wait()
		p.code = exitCode(err)
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	select {
	case p.banner = <-banner:
	case <-p.done:
		t.Fatalf("serve %q exited with %d before it served; stderr:\n%s", args, p.code, p.stderr.String())
	case <-time.After(processTimeout):
		t.Fatalf("serve %q printed no banner within %v; stderr:\n%s", args, processTimeout, p.stderr.String())
	}
	return p
}

// exitCode returns the exit code of a finished process, 128+N for signal N.
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}

// signal sends sig to the process.
func (p *serveProc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// stop sends SIGTERM and returns the exit code once the process ended.
func (p *serveProc) stop() int {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	return p.wait(processTimeout)
}

// wait returns the exit code once the process ended, failing the test if it
// runs longer than timeout.
func (p *serveProc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("serve still runs %v later; stderr:\n%s", timeout, p.stderr.String())
		return -1
	}
}

// waitLog waits up to timeout for the log on stderr to contain every one
// of subs, and reports whether it did.
func (p *serveProc) waitLog(timeout time.Duration, subs ...string) bool {
	return waitFor(timeout, func() bool {
		log := p.stderr.String()
		for _, s := range subs {
			if !strings.Contains(log, s) {
				return false
			}
		}
		return true
	})
}

// api is a client of a service's Connect JSON API.
type api struct {
	base  string
	token string
	hc    *http.Client
}

// apiOf returns a client of p, with bearer token token ("" sends none).
func apiOf(p *serveProc, token string) api {
	return api{base: p.banner.URL, token: token, hc: &http.Client{Timeout: 30 * time.Second}}
}

// reply is an RPC's outcome: the response's fields, or an error code (as
// Connect spells it: "aborted", "not_found", ...). code is "" on success;
// a request that got no HTTP response has code "transport".
type reply struct {
	code string
	msg  string
	body map[string]any
}

// call makes the RPC method with the JSON request req.
func (a api) call(ctx context.Context, method string, req map[string]any) reply {
	data, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/distlock.v1.LockService/"+method, bytes.NewReader(data))
	if err != nil {
		return reply{code: "transport", msg: err.Error()}
	}
	hr.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		hr.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.hc.Do(hr)
	if err != nil {
		return reply{code: "transport", msg: err.Error()}
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return reply{code: "transport", msg: fmt.Sprintf("HTTP %d: undecodable body: %v", resp.StatusCode, err)}
	}
	if resp.StatusCode != http.StatusOK {
		code, _ := body["code"].(string)
		msg, _ := body["message"].(string)
		return reply{code: code, msg: msg}
	}
	return reply{body: body}
}

// str returns the string field name of the reply.
func (r reply) str(name string) string {
	s, _ := r.body[name].(string)
	return s
}

// mustOK fails the test unless r succeeded, and returns it.
func mustOK(t *testing.T, what string, r reply) reply {
	t.Helper()
	if r.code != "" {
		t.Fatalf("%s: %s: %s", what, r.code, r.msg)
	}
	return r
}

// wantCode fails the test unless r failed with code.
func wantCode(t *testing.T, what string, r reply, code string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: code %q (%s), want %q", what, r.code, r.msg, code)
	}
}

// get returns the status and body of GET base+path.
func get(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(body)
}

// testCtx returns a context that ends with the test or after d.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// writeFile writes content to dir/name and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// portOf returns the port of a HOST:PORT address.
func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}
