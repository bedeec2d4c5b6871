package cli

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// certificate is the server's TLS certificate, replaced when its files
// change: a renewed certificate is served without a restart, to new
// connections.
type certificate struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time
	cur               atomic.Pointer[tls.Certificate]
}

// certExpiryWarning is how long before its end a certificate is warned of.
const certExpiryWarning = 14 * 24 * time.Hour

// load reads the certificate and key files and puts the pair in force. A
// certificate past its end, or before its start, is refused: every client
// would refuse it, and a reload would hide the outage behind a served port.
// One that ends within certExpiryWarning is put in force with a warning.
func (c *certificate) load([]byte) error {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("%s, %s: %w", c.certFile, c.keyFile, err)
	}
	now, leaf := c.now(), pair.Leaf
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("%s: the certificate expired at %s, %s ago: renew it",
			c.certFile, leaf.NotAfter.UTC().Format(time.RFC3339), now.Sub(leaf.NotAfter).Round(time.Second))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("%s: the certificate is not valid before %s, in %s: check the clock",
			c.certFile, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotBefore.Sub(now).Round(time.Second))
	case leaf.NotAfter.Sub(now) < certExpiryWarning:
		c.log.Warn("the TLS certificate expires soon: renew it", "file", c.certFile,
			"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "in", leaf.NotAfter.Sub(now).Round(time.Second).String())
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
	cfg.certs = &certificate{certFile: f.tlsCert, keyFile: f.tlsKey, log: cfg.log, now: time.Now}
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
