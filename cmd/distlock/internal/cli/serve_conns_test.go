package cli

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/distlock/distlock/cmd/distlock/internal/embedetcd"
)

// TestServeTricklingBodies is the slow-body attack: the service runs with
// a hard limit of 256 open files, and 320 connections from 127.0.0.2 each
// send the headers of a POST /dashboard/login with a body of 1000 bytes,
// then one byte of it a second. The service keeps answering /healthz from
// 127.0.0.1 within 2s, does not exit, and cuts every trickling connection:
// those over --max-connections-per-ip at once, the others when
// --body-timeout is up. Its serving line shows the open-file limit, raised
// by Go from a soft limit of 64 to the hard limit (less one), and the
// caps; SIGTERM still stops it with 0.
func TestServeTricklingBodies(t *testing.T) {
	const (
		hardLimit   = 256 // open files the service may have
		attackConns = 320 // more than it may have
		perIP       = 32
		bodyTimeout = 3 * time.Second
		attackFor   = 8 * time.Second
		probeEvery  = 250 * time.Millisecond
		probeWithin = 2 * time.Second
	)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("the test lowers serve's open-file limit with sh, which is not on PATH (apt-get install dash): %v", err)
	}
	args := []string{"serve", "-o", "json", "--insecure-no-auth", "--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(t.TempDir(), "state"),
		"--body-timeout", bodyTimeout.String(), "--max-connections-per-ip", strconv.Itoa(perIP)}
	cmd := serveCommandLine(nil, args...)
	cmd.Path = sh
	cmd.Args = append([]string{"sh", "-c", fmt.Sprintf(`ulimit -S -n 64 && ulimit -H -n %d && exec "$0" "$@"`, hardLimit)}, cmd.Args...)
	p := startServeCmd(t, cmd, args)
	addr := p.banner.Listen

	start := time.Now()
	end := start.Add(attackFor)
	cut := make([]time.Duration, attackConns) // when the server closed each connection; 0: never
	dialErrs := make([]error, attackConns)
	var wg sync.WaitGroup
	for i := range attackConns {
		wg.Go(func() { cut[i], dialErrs[i] = trickle(addr, end) })
	}

	// Meanwhile: /healthz from 127.0.0.1, on a new connection each time.
	hc := &http.Client{Timeout: probeWithin, Transport: &http.Transport{DisableKeepAlives: true}}
	var probes, slowest time.Duration
	var failed []string
	for n := 0; time.Now().Before(end); n++ {
		t0 := time.Now()
		code, err := probe(hc, p.banner.URL+"/healthz")
		took := time.Since(t0)
		slowest = max(slowest, took)
		if err != nil || code != http.StatusOK {
			failed = append(failed, fmt.Sprintf("%.1fs: %d %v", t0.Sub(start).Seconds(), code, err))
		}
		probes++
		select {
		case <-p.done:
			t.Fatalf("serve exited with %d during the attack; stderr:\n%s", p.code, tail(p.stderr.String(), 20))
		case <-time.After(probeEvery):
		}
	}
	wg.Wait()

	var atOnce, atTimeout, late, open, dialFailed int
	for i, d := range cut {
		switch {
		case dialErrs[i] != nil:
			dialFailed++
		case d == 0:
			open++
		case d < time.Second:
			atOnce++
		case d <= bodyTimeout+1500*time.Millisecond:
			atTimeout++
		default:
			late++
		}
	}
	t.Logf("%d connections: %d cut at once, %d at the body timeout, %d later, %d still open after %v, %d not dialled; %d probes of /healthz, %d failed, slowest %v",
		attackConns, atOnce, atTimeout, late, open, attackFor, dialFailed, probes, len(failed), slowest)
	if len(failed) > 0 {
		t.Errorf("/healthz failed during the attack (%d of %d): %s", len(failed), probes, strings.Join(failed[:min(len(failed), 5)], "; "))
	}
	if late > 0 || open > 0 || dialFailed > 0 {
		t.Errorf("%d connections cut after %v + 1.5s and %d never; %d not dialled (first error %v)", late, bodyTimeout, open, dialFailed, errors.Join(dialErrs...))
	}
	if atTimeout > perIP {
		t.Errorf("%d connections held until the body timeout; --max-connections-per-ip is %d", atTimeout, perIP)
	}

	code, metrics := get(t, &http.Client{Timeout: 5 * time.Second}, p.banner.Metrics)
	if code != http.StatusOK || !strings.Contains(metrics, `distlock_server_connections_refused_total{limit="per_ip"}`) {
		t.Errorf("/metrics: %d, no count of the connections refused per IP", code)
	}
	// Go raises the soft limit to the hard limit less one (syscall's
	// rlimit.go, go.dev/issue/46279); the default cap is half of that.
	serving := logRecord(p.stderr.String(), "serving")
	for k, want := range map[string]float64{"open_files": hardLimit - 1, "max_connections": (hardLimit - 1) / 2, "max_connections_per_ip": perIP} {
		if got, _ := serving[k].(float64); got != want {
			t.Errorf("serving line: %s = %v, want %v (%v)", k, serving[k], want, serving)
		}
	}
	if code := p.stop(); code != 0 || !strings.Contains(p.stderr.String(), `"msg":"stopping"`) {
		t.Errorf("exit code %d after SIGTERM; stderr:\n%s", code, tail(p.stderr.String(), 20))
	}
}

// trickle dials addr from 127.0.0.2, sends the headers of a POST with a
// body of 1000 bytes, then one byte of the body a second until end. It
// returns how long after the dial the server closed the connection (a
// response, if any, is read along), or 0 if it was still open at end.
func trickle(addr string, end time.Time) (time.Duration, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	head := "POST /dashboard/login HTTP/1.1\r\nHost: " + addr +
		"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\n"
	if _, err := io.WriteString(c, head); err != nil {
		return time.Since(start), nil
	}
	buf := make([]byte, 4096)
	for sent := 0; time.Now().Before(end); {
		wake := time.Now().Add(time.Second)
		if wake.After(end) {
			wake = end
		}
		_ = c.SetReadDeadline(wake)
		_, err := c.Read(buf)
		var ne net.Error
		switch {
		case err == nil: // a response: read on until the close
		case errors.As(err, &ne) && ne.Timeout():
			if sent < 1000 {
				if _, err := c.Write([]byte{'t'}); err != nil {
					return time.Since(start), nil
				}
				sent++
			}
		default: // EOF or a reset
			return time.Since(start), nil
		}
	}
	return 0, nil
}

// probe returns the status of GET url.
func probe(hc *http.Client, url string) (int, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, err
}

// logRecord returns the first JSON log record of the log whose msg is msg,
// or nil.
func logRecord(log, msg string) map[string]any {
	for line := range strings.Lines(log) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			return rec
		}
	}
	return nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestBodyDeadline serves with serve's HTTP server and a body timeout of
// 300ms over each protocol serve speaks (HTTP/1.1, HTTP/2 in cleartext,
// HTTP/2 over TLS): a body sent a byte every 100ms fails at the timeout;
// a body sent at once and then a handler that runs three times the
// timeout, and a request without a body that does, keep their context
// and answer; over HTTP/1.1 the next request on the same connection
// works too.
func TestBodyDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	pk := newPKI(t, t.TempDir())
	pair, err := tls.LoadX509KeyPair(pk.serverCert, pk.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		tls   bool
		proto func(*http.Protocols)
		major int
	}{
		{"HTTP/1.1", false, func(p *http.Protocols) { p.SetHTTP1(true) }, 1},
		{"h2c", false, func(p *http.Protocols) { p.SetUnencryptedHTTP2(true) }, 2},
		{"h2", true, func(p *http.Protocols) { p.SetHTTP2(true) }, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			type seen struct {
				path  string
				major int
				err   error
				took  time.Duration
			}
			seenc := make(chan seen, 10)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				t0 := time.Now()
				_, err := io.ReadAll(r.Body)
				if err == nil && r.URL.Path == "/wait" {
					select {
					case <-r.Context().Done():
						err = r.Context().Err()
					case <-time.After(3 * timeout):
					}
				}
				seenc <- seen{r.URL.Path, r.ProtoMajor, err, time.Since(t0)}
				if err != nil {
					w.WriteHeader(http.StatusRequestTimeout)
				}
			})
			cfg := &serveConfig{flags: &serveFlags{bodyTimeout: timeout}, log: slog.New(slog.DiscardHandler)}
			if c.tls {
				cfg.tls = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
			}
			hs := cfg.httpServer(h)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan struct{})
			go func() {
				defer close(served)
				if c.tls {
					_ = hs.ServeTLS(ln, "", "")
				} else {
					_ = hs.Serve(ln)
				}
			}()
			defer func() { _ = hs.Close(); <-served }()

			tr := &http.Transport{Protocols: new(http.Protocols)}
			c.proto(tr.Protocols)
			base := "http://" + ln.Addr().String()
			if c.tls {
				tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pk.pool}
				base = "https://" + ln.Addr().String()
			}
			hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			defer tr.CloseIdleConnections()
			next := func() seen {
				t.Helper()
				select {
				case s := <-seenc:
					if s.major != c.major {
						t.Errorf("%s served over HTTP/%d, want %d", s.path, s.major, c.major)
					}
					return s
				case <-time.After(10 * time.Second):
					t.Fatal("no request reached the handler within 10s")
					return seen{}
				}
			}

			// A trickled body: one byte every 100ms, for 5s at most.
			pr, pw := io.Pipe()
			var wg sync.WaitGroup
			wg.Go(func() {
				for range 50 {
					if _, err := pw.Write([]byte{'t'}); err != nil {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
				_ = pw.Close()
			})
			req, _ := http.NewRequest(http.MethodPost, base+"/read", pr)
			if resp, err := hc.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			s := next()
			_ = pw.CloseWithError(errors.New("done"))
			wg.Wait()
			if !errors.Is(s.err, os.ErrDeadlineExceeded) || s.took < timeout-50*time.Millisecond || s.took > timeout+time.Second {
				t.Errorf("a trickled body: %v after %v; want a deadline error after %v", s.err, s.took, timeout)
			}

			// A body sent at once, then a handler three times as long as the
			// timeout; then one without a body.
			for _, body := range []io.Reader{strings.NewReader(`{"key":"k"}`), nil} {
				req, _ := http.NewRequest(http.MethodPost, base+"/wait", body)
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatalf("/wait: %v", err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if s := next(); s.err != nil || resp.StatusCode != http.StatusOK {
					t.Errorf("/wait with body %v: %d, %v after %v", body != nil, resp.StatusCode, s.err, s.took)
				}
			}
		})
	}
}

// TestConnLimiter accepts real connections from several loopback
// addresses through a connLimiter of 4 in all and 2 an address: the third
// of one address and the fifth in all are closed at once and counted; a
// connection closed (twice) makes room for one; a flood of refused
// connections is logged once.
func TestConnLimiter(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	l, err := limitConns(raw, connCaps{max: 4, perIP: 2}, slog.New(slog.NewJSONHandler(&logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 8)
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var clients, servers []net.Conn
	defer func() {
		_ = l.Close()
		<-acceptDone
		for _, c := range append(clients, servers...) {
			_ = c.Close()
		}
	}()
	// dial connects from src and reports whether the limiter let the
	// connection through (else the server closed it).
	dial := func(src string) bool {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatalf("dial from %s: %v", src, err)
		}
		clients = append(clients, c)
		for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); {
			select {
			case sc := <-accepted:
				servers = append(servers, sc)
				return true
			default:
			}
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
				return false // closed by the server
			}
		}
		t.Fatalf("a connection from %s neither accepted nor closed within 4s", src)
		return false
	}
	for i, want := range []struct {
		src string
		ok  bool
	}{
		{"127.0.0.2", true}, {"127.0.0.2", true}, {"127.0.0.2", false}, // per address
		{"127.0.0.3", true}, {"127.0.0.3", true}, {"127.0.0.4", false}, // in all
	} {
		if got := dial(want.src); got != want.ok {
			t.Fatalf("connection %d from %s let through: %v, want %v", i, want.src, got, want.ok)
		}
	}
	_ = servers[0].Close()
	_ = servers[0].Close() // counted out once
	if !dial("127.0.0.4") || dial("127.0.0.4") {
		t.Fatal("after a close: want one more connection, not two")
	}
	for range 20 {
		if dial("127.0.0.5") {
			t.Fatal("a connection over the limit was let through")
		}
	}
	for _, m := range []struct {
		name, limit string
		want        float64
	}{
		{"distlock_server_connections_refused_total", "per_ip", 1},
		{"distlock_server_connections_refused_total", "total", 22},
		{"distlock_server_connections", "", 4},
	} {
		if got := metricValue(t, reg, m.name, m.limit); got != m.want {
			t.Errorf("%s{limit=%q} = %v, want %v", m.name, m.limit, got, m.want)
		}
	}
	if n := strings.Count(logs.String(), "connections refused"); n != 1 {
		t.Errorf("refusals logged %d times in a burst, want once:\n%s", n, logs.String())
	}
}

// TestConnCaps derives the caps from the open-file limit and the flags.
func TestConnCaps(t *testing.T) {
	for _, c := range []struct {
		limit           uint64
		maxConns, perIP int
		perIPSet        bool
		want            connCaps
		warn            bool
	}{
		{limit: 1 << 20, want: connCaps{max: 1<<20 - 512, perIP: 256}},
		{limit: 4096, want: connCaps{max: 3584, perIP: 256}},
		{limit: 1023, want: connCaps{max: 511, perIP: 255}},
		{limit: 255, want: connCaps{max: 127, perIP: 63}},
		{limit: 1, want: connCaps{max: 1, perIP: 1}},
		{limit: 1 << 62, want: connCaps{max: math.MaxInt32 - 512, perIP: 256}},
		{limit: 255, perIP: 32, perIPSet: true, want: connCaps{max: 127, perIP: 32}},
		{limit: 255, perIP: 0, perIPSet: true, want: connCaps{max: 127, perIP: 63}},
		{limit: 4096, maxConns: 100, perIP: 500, perIPSet: true, want: connCaps{max: 100, perIP: 100}},
		{limit: 4096, maxConns: 4000, want: connCaps{max: 4000, perIP: 256}, warn: true},
	} {
		f := &serveFlags{maxConns: c.maxConns, maxConnsPerIP: c.perIP, perIPSet: c.perIPSet}
		if !c.perIPSet {
			f.maxConnsPerIP = DefaultMaxConnectionsPerIP
		}
		c.want.openFiles = c.limit
		got, warn := f.connCaps(c.limit)
		if got != c.want || (warn != "") != c.warn {
			t.Errorf("limit %d, flags %d/%d (given %v): %+v, warning %q; want %+v, a warning %v",
				c.limit, c.maxConns, c.perIP, c.perIPSet, got, warn, c.want, c.warn)
		}
	}
}

// TestAddrKey counts IPv4 addresses one by one, IPv4-mapped ones as IPv4,
// and IPv6 ones by /64.
func TestAddrKey(t *testing.T) {
	key := func(s string) netip.Addr { return addrKey(net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s))) }
	if key("127.0.0.2:1") == key("127.0.0.3:1") || key("127.0.0.2:1") != key("127.0.0.2:2") {
		t.Error("IPv4 addresses are not counted one by one")
	}
	if key("[::ffff:127.0.0.2]:1") != key("127.0.0.2:1") {
		t.Error("an IPv4-mapped address is not counted as its IPv4 address")
	}
	if key("[2001:db8:0:1::1]:1") != key("[2001:db8:0:1:ffff::2]:1") || key("[2001:db8:0:1::1]:1") == key("[2001:db8:0:2::1]:1") {
		t.Error("IPv6 addresses are not counted by /64")
	}
}

// TestServeStoreFatal is what a fatal error of the embedded etcd does to
// serve (embedetcd's TestFatalDoesNotExit makes one): a "stopping" line
// with the reason and etcd's message, then exit code 69 (ExitUnavailable).
func TestServeStoreFatal(t *testing.T) {
	var logs syncBuffer
	code := -1
	cfg := &serveConfig{log: slog.New(slog.NewJSONHandler(&logs, nil)), exit: func(c int) { code = c }}
	cfg.storeFatal(&embedetcd.FatalError{Message: "failed to purge wal file"})
	rec := logRecord(logs.String(), "stopping")
	if code != ExitUnavailable || rec == nil || rec["level"] != "ERROR" ||
		rec["reason"] != "the embedded etcd failed" || rec["err"] != "embedetcd: etcd failed: failed to purge wal file" {
		t.Errorf("exit %d, log:\n%s", code, logs.String())
	}
}

// TestServeConnFlags refuses bad connection, body and per-tenant flags with
// exit code 2, and --help shows them with their defaults.
func TestServeConnFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-connections", "-1"}, "--max-connections -1"},
		{[]string{"--max-connections-per-ip", "-5"}, "--max-connections-per-ip -5"},
		{[]string{"--body-timeout", "0s"}, "--body-timeout 0s"},
		{[]string{"--body-timeout", "-1s"}, "--body-timeout -1s"},
		{[]string{"--max-waiters-per-tenant", "0"}, "--max-waiters-per-tenant 0"},
		{[]string{"--max-streams-per-tenant", "-1"}, "--max-streams-per-tenant -1"},
		{[]string{"--max-stream-lifetime", "0s"}, "--max-stream-lifetime 0s"},
		{[]string{"--max-streams-per-connection", "0"}, "--max-streams-per-connection 0"},
		{[]string{"--rate-per-tenant", "-1"}, "--rate-per-tenant -1"},
		{[]string{"--rate-per-tenant", "NaN"}, "--rate-per-tenant NaN"},
		{[]string{"--burst-per-tenant", "-1"}, "--burst-per-tenant -1"},
		{[]string{"--burst-per-tenant", "10"}, "--burst-per-tenant 10 needs --rate-per-tenant"},
	} {
		var stdout, stderr strings.Builder
		code := Main(append([]string{"serve", "--insecure-no-auth"}, c.args...), strings.NewReader(""), &stdout, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), ExitUsage, c.want)
		}
	}
	var stdout, stderr strings.Builder
	if code := Main([]string{"serve", "--help"}, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"--max-connections int", "--max-connections-per-ip int", "(default 256)", "--body-timeout duration", "(default 30s)",
		"--max-waiters-per-tenant int", "(default 1000)", "--max-streams-per-tenant int", "(default 64)", "--max-stream-lifetime duration", "(default 1h0m0s)",
		"--max-streams-per-connection int", "(default 100)", "--rate-per-tenant float", "(0: no limit)", "--burst-per-tenant int"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help has no %q", want)
		}
	}
}

// metricValue returns the value of the counter or gauge name of reg whose
// label "limit" is limit ("": none), or -1 if there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name, limit string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var got string
			for _, l := range m.GetLabel() {
				if l.GetName() == "limit" {
					got = l.GetValue()
				}
			}
			if got == limit {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return -1
}
