package cli

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestServeStreamsPerConnection is the many-streams attack: one cleartext
// HTTP/2 connection, before any token is checked, opens more requests than
// the service allows a connection, each a POST whose body never comes.
// With default flags the service announces DefaultMaxStreamsPerConnection
// in its SETTINGS and resets every stream past it at once, so that one
// connection cannot hold more handlers than that, whatever
// --max-connections allows.
func TestServeStreamsPerConnection(t *testing.T) {
	p := startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(t.TempDir(), "state"))
	c, err := net.DialTimeout("tcp", p.banner.Listen, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	announced := readServerSettings(t, fr)
	if announced != DefaultMaxStreamsPerConnection {
		t.Errorf("the service announces %d concurrent streams a connection, want %d", announced, DefaultMaxStreamsPerConnection)
	}
	if err := fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}

	const extra = 4
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for i := range DefaultMaxStreamsPerConnection + extra {
		block.Reset()
		for _, f := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":authority", p.banner.Listen}, {":path", "/dashboard/login"},
			{"content-type", "application/x-www-form-urlencoded"}, {"content-length", "1000"},
		} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
			t.Fatalf("stream %d: %v", id, err)
		}
	}

	// Every stream past the cap is reset; those within it wait for their
	// bodies. Read until the resets are in or nothing comes for 2s.
	reset := map[uint32]http2.ErrCode{}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	for len(reset) < extra {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			reset[rst.StreamID] = rst.ErrCode
		}
	}
	for i := range extra {
		id := uint32(2*(DefaultMaxStreamsPerConnection+i) + 1)
		if code, ok := reset[id]; !ok {
			t.Errorf("stream %d, past the cap, was not reset (resets: %v)", id, reset)
		} else if code != http2.ErrCodeRefusedStream && code != http2.ErrCodeProtocol {
			t.Errorf("stream %d reset with %v, want REFUSED_STREAM or PROTOCOL_ERROR", id, code)
		}
	}
	for id := range reset {
		if id < 2*DefaultMaxStreamsPerConnection {
			t.Errorf("stream %d, within the cap, was reset with %v", id, reset[id])
		}
	}
	c.Close()
	if code := p.stop(); code != 0 {
		t.Errorf("serve exited with %d on SIGTERM", code)
	}
}

// readServerSettings reads frames up to the server's first SETTINGS and
// returns the number of concurrent streams it allows, or -1 if it sets none.
func readServerSettings(t *testing.T, fr *http2.Framer) int {
	t.Helper()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); ok {
			return int(v)
		}
		return -1
	}
}

// TestServeRatePerTenant: --rate-per-tenant and --burst-per-tenant reach the
// service. With a rate of 1 a second and bursts of 2, the third call in a
// row gets HTTP 429 naming the limit.
func TestServeRatePerTenant(t *testing.T) {
	p := startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(t.TempDir(), "state"), "--rate-per-tenant", "1", "--burst-per-tenant", "2")
	hc := &http.Client{Timeout: 10 * time.Second}
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		resp, err := hc.Post(p.banner.URL+"/distlock.v1.LockService/List", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("call %d: %d %s, want %d", i+1, resp.StatusCode, body, want)
		}
		if want == http.StatusTooManyRequests && !strings.Contains(string(body), "rate limit of 1 calls a second per tenant, bursts of 2") {
			t.Errorf("the refusal does not name the limit: %s", body)
		}
	}
	if code := p.stop(); code != 0 {
		t.Errorf("serve exited with %d on SIGTERM", code)
	}
}
