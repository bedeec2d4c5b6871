package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeTricklingBodies is the slow-body attack: the service runs with
// a hard limit of 256 open files, and 320 connections from 127.0.0.2 each
// send the headers of a POST /dashboard/login with a body of 1000 bytes,
// then one byte of it a second. The service keeps answering /healthz from
// 127.0.0.1 within 2s, does not exit, and cuts every trickling connection:
// those over --max-connections-per-ip at once, the others when
// --body-timeout is up. Its serving line shows the open-file limit, raised
// by Go from a soft limit of 64 to the hard limit, and the caps; SIGTERM
// still stops it with 0.
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
		t.Skip("no sh to lower the open-file limit with")
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
	serving := logRecord(p.stderr.String(), "serving")
	for k, want := range map[string]float64{"open_files": hardLimit, "max_connections": hardLimit / 2, "max_connections_per_ip": perIP} {
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
