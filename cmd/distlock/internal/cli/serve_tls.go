package cli

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync/atomic"
)

// certificate is the server's TLS certificate, replaced when its files
// change: a renewed certificate is served without a restart, to new
// connections.
type certificate struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
}

// load reads the certificate and key files and puts the pair in force.
func (c *certificate) load([]byte) error {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("%s, %s: %w", c.certFile, c.keyFile, err)
	}
	c.cur.Store(&pair)
	return nil
}

// get is tls.Config.GetCertificate.
func (c *certificate) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cur.Load(), nil }

// prepareTLS checks the TLS flags, loads the certificate and the client CA
// and builds the TLS config; none without --tls-cert.
func (cfg *serveConfig) prepareTLS() error {
	f := cfg.flags
	switch {
	case f.tlsCert == "" && f.tlsKey == "" && f.tlsClientCA == "":
		return nil
	case f.tlsCert == "" || f.tlsKey == "":
		return usage("serve: --tls-cert and --tls-key go together")
	}
	cfg.certs = &certificate{certFile: f.tlsCert, keyFile: f.tlsKey}
	// Both files are watched: a renewal that writes one and then the other
	// fails on the first (a mismatched pair, logged) and takes on the second.
	for _, path := range []string{f.tlsCert, f.tlsKey} {
		w := &watchedFile{path: path, what: "TLS certificate", load: cfg.certs.load}
		if err := w.first(); err != nil {
			return exit(ExitUsage, &opError{op: "serve: --tls-cert/--tls-key", err: err})
		}
		cfg.reloads = append(cfg.reloads, w)
	}
	cfg.tls = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cfg.certs.get}
	if f.tlsClientCA == "" {
		return nil
	}
	pem, err := os.ReadFile(f.tlsClientCA)
	if err != nil {
		return exit(ExitUsage, &opError{op: "serve: --tls-client-ca", err: err})
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return usage("serve: --tls-client-ca %s: no PEM certificate in it", f.tlsClientCA)
	}
	cfg.tls.ClientCAs = pool
	cfg.tls.ClientAuth = tls.RequireAndVerifyClientCert
	return nil
}
