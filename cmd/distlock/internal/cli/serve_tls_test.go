package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki is a throwaway CA with a server and a client certificate, written as
// PEM files in a test's directory.
type pki struct {
	pool                  *x509.CertPool
	caFile                string
	serverCert, serverKey string
	client                tls.Certificate
}

// newPKI creates the CA and the certificates: the server's for 127.0.0.1
// and localhost.
func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	caKey, caDER := newCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "distlock test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{pool: x509.NewCertPool(), caFile: writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)}
	p.pool.AddCert(ca)
	srvKey, srvDER := newCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: "distlock"}, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, caKey)
	p.serverCert = writePEM(t, dir, "server.pem", "CERTIFICATE", srvDER)
	p.serverKey = writePEM(t, dir, "server-key.pem", "PRIVATE KEY", marshalKey(t, srvKey))
	cliKey, cliDER := newCert(t, &x509.Certificate{
		Subject:  pkix.Name{CommonName: "client"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	p.client = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	return p
}

// newCert returns a new key and tmpl signed by parent's key (itself if nil),
// valid from an hour ago for two hours unless tmpl says otherwise.
func newCert(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	if tmpl.NotAfter.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

func marshalKey(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// writePEM writes one PEM block to dir/name and returns its path.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tlsClient returns an HTTP client that trusts roots (the system's if nil)
// and presents cert if not nil.
func tlsClient(roots *x509.CertPool, cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
}

// TestServeTLS serves over TLS with a certificate of a test CA: a client
// that trusts the CA acquires a lock over HTTP/2, one that does not is
// refused in the handshake. With --tls-client-ca the service also refuses
// a client without a certificate and serves one with a certificate of the
// CA.
func TestServeTLS(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	dir := t.TempDir()
	ca := newPKI(t, dir)
	tokens := writeFile(t, dir, "tokens", tokenA+" acme client\n")
	base := []string{"--tokens", tokens, "--listen", "127.0.0.1:0", "--tls-cert", ca.serverCert, "--tls-key", ca.serverKey}

	t.Run("tls", func(t *testing.T) {
		p := startServe(t, nil, append(base, "--data-dir", filepath.Join(dir, "tls"))...)
		if !strings.HasPrefix(p.banner.URL, "https://127.0.0.1:") || p.banner.TLS != "tls" {
			t.Errorf("banner %+v", p.banner)
		}
		a := apiOf(p, tokenA)
		a.hc = tlsClient(ca.pool, nil)
		mustOK(t, "Acquire over TLS", a.call(ctx, "Acquire", map[string]any{"key": "k", "lease": "30s"}))
		resp, err := a.hc.Get(p.banner.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("over TLS the protocol is %s, want HTTP/2", resp.Proto)
		}
		if _, err := tlsClient(nil, nil).Get(p.banner.URL + "/healthz"); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("a client that does not trust the CA: %v; want a certificate error", err)
		}
		// Go's TLS server answers a plain HTTP request with a 400.
		if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(strings.Replace(p.banner.URL, "https:", "http:", 1) + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("plain HTTP to the TLS port: %s", resp.Status)
			}
		}
		if code := p.stop(); code != 0 {
			t.Errorf("exit %d", code)
		}
	})

	t.Run("mtls", func(t *testing.T) {
		p := startServe(t, nil, append(base, "--tls-client-ca", ca.caFile, "--data-dir", filepath.Join(dir, "mtls"))...)
		if p.banner.TLS != "mtls" || !strings.Contains(p.banner.Curl, "--cert ") {
			t.Errorf("banner %+v", p.banner)
		}
		anon := apiOf(p, tokenA)
		anon.hc = tlsClient(ca.pool, nil)
		// With TLS 1.3 the refusal may reach the client as a certificate
		// alert or as a connection closed: either way no response comes.
		if r := anon.call(ctx, "Inspect", map[string]any{"key": "k"}); r.code != "transport" {
			t.Errorf("a client without a certificate: %q %s; want refused in the handshake", r.code, r.msg)
		}
		a := apiOf(p, tokenA)
		a.hc = tlsClient(ca.pool, &ca.client)
		mustOK(t, "Acquire with a client certificate", a.call(ctx, "Acquire", map[string]any{"key": "k", "lease": "30s"}))
		// The certificate is not the token: without one, the call is refused.
		a.token = ""
		wantCode(t, "a certificate without a token", a.call(ctx, "Inspect", map[string]any{"key": "k"}), "unauthenticated")
		if code := p.stop(); code != 0 {
			t.Errorf("exit %d", code)
		}
	})
}

// A certificate past its end or before its start is refused, at start (exit
// 2, nothing served) and at a reload (the one in force stays); one that ends
// within two weeks is served with a warning.
func TestServeCertificateValidity(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	write := func(name string, notBefore, notAfter time.Time) (string, string) {
		key, der := newCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, DNSNames: []string{"localhost"},
			NotBefore: notBefore, NotAfter: notAfter}, nil, nil)
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", marshalKey(t, key))
	}
	for _, c := range []struct {
		name                string
		notBefore, notAfter time.Time
		err, warn           string
	}{
		{"expired", now.Add(-48 * time.Hour), now.Add(-time.Hour), "the certificate expired at", ""},
		{"future", now.Add(time.Hour), now.Add(48 * time.Hour), "the certificate is not valid before", ""},
		{"soon", now.Add(-time.Hour), now.Add(72 * time.Hour), "", "the TLS certificate expires soon"},
		{"fine", now.Add(-time.Hour), now.Add(90 * 24 * time.Hour), "", ""},
	} {
		certFile, keyFile := write(c.name, c.notBefore, c.notAfter)
		var logs syncBuffer
		cert := &certificate{certFile: certFile, keyFile: keyFile, log: slog.New(slog.NewJSONHandler(&logs, nil)), now: time.Now}
		err := cert.load(nil)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: load = %v, want an error saying %q", c.name, err, c.err)
		case c.err != "" && cert.cur.Load() != nil:
			t.Errorf("%s: the refused certificate was put in force", c.name)
		case c.err == "" && err != nil:
			t.Errorf("%s: load = %v", c.name, err)
		case c.warn != "" && !strings.Contains(logs.String(), c.warn):
			t.Errorf("%s: no warning %q in the log: %s", c.name, c.warn, logs.String())
		case c.warn == "" && logs.String() != "":
			t.Errorf("%s: logged %s", c.name, logs.String())
		}
	}

	certFile, keyFile := write("expired-at-start", now.Add(-48*time.Hour), now.Add(-time.Hour))
	var stdout, stderr strings.Builder
	code := Main([]string{"serve", "--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"),
		"--tls-cert", certFile, "--tls-key", keyFile}, strings.NewReader(""), &stdout, &stderr)
	if code != ExitUsage || !strings.Contains(stderr.String(), "the certificate expired at") {
		t.Errorf("serve with an expired certificate: exit %d, stderr %q; want %d and the expiry", code, stderr.String(), ExitUsage)
	}
}
