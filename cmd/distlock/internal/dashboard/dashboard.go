// Package dashboard is the lock service's web page: who holds which lock,
// for how long, who waits, and which holds ended against their holders'
// will, live in the browser.
//
// The page is rendered on the server (html/template) with a small script
// and a style sheet, all embedded: no build step, no framework, nothing
// from another origin. Without JavaScript it is a static table that
// reloads itself every 2 seconds; with it, the script renders each view
// the server pushes over server-sent events (GET /dashboard/events): the
// whole view, at most every 500 ms and only when it changed, so a stream
// that drops and reconnects (EventSource does, by itself) can neither
// duplicate nor miss a row.
//
// The data is the server's monitor (server.Server.Monitor): every
// tenant's held locks, polled from the store twice a second while a page
// is open, and what only this instance knows of the calls made through it:
// waits, refused renewals, forced releases with their reasons.
//
// Auth is the service's own: a token of its token file, entered once in
// the page's form, kept in an HttpOnly, SameSite=Strict cookie (Secure over
// TLS), never in a URL or a log. A viewer or client sees its tenant's
// locks; an admin sees every tenant's and may force-release a lock, or ask
// its holder to release it, with a reason and a confirmation, through the
// server's ForceRelease and RequestRelease (so the audit log records it). Every POST carries a CSRF token (double submit:
// a cookie and a form field that must match) and passes
// http.CrossOriginProtection.
//
// Routes: GET / (the page, or the login form), and under /dashboard/:
// POST login, POST logout, GET events, GET and POST force-release, POST
// request-release, GET static/. Register mounts them on a mux beside the API.
package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
)

//go:embed page.html
var pageHTML string

//go:embed static
var staticFiles embed.FS

// Cookie names.
const (
	tokenCookie = "distlock_token" // the bearer token, base64url
	csrfCookie  = "distlock_csrf"  // the CSRF token the forms must repeat
)

// maxPrefixLen bounds the prefix filter, as the API bounds keys.
const maxPrefixLen = 512

// Config configures a Dashboard.
type Config struct {
	// Server is the lock service whose locks the page shows, whose keyring
	// admits its users and whose ForceRelease it calls.
	Server *server.Server
	// Logger receives the page's own failures (a template that fails to
	// render, say); never a token. nil discards them.
	Logger *slog.Logger
	// Addr is the service's address (host:port) that the page's example
	// command calls; the page never repeats a request's Host header.
	Addr string
}

// Dashboard is the lock service's web page. Create it with New.
type Dashboard struct {
	srv      *server.Server
	log      *slog.Logger
	addr     string // the service's, for the example command
	tmpl     *template.Template
	assetVer string // a digest of the static files, for cache busting
	handler  http.Handler
}

// New returns the dashboard of cfg.Server.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Server == nil {
		return nil, errors.New("dashboard: Config.Server is nil")
	}
	d := &Dashboard{srv: cfg.Server, log: cfg.Logger, addr: cfg.Addr}
	if d.log == nil {
		d.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var err error
	if d.tmpl, err = template.New("page").Funcs(funcs).Parse(pageHTML); err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	for _, name := range []string{"dashboard.css", "dashboard.js"} {
		b, err := fs.ReadFile(static, name)
		if err != nil {
			return nil, err
		}
		h.Write(b)
	}
	d.assetVer = hex.EncodeToString(h.Sum(nil))[:12]

	cop := http.NewCrossOriginProtection()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.page)
	mux.HandleFunc("GET /dashboard/events", d.events)
	mux.Handle("POST /dashboard/login", cop.Handler(http.HandlerFunc(d.login)))
	mux.Handle("POST /dashboard/logout", cop.Handler(http.HandlerFunc(d.logout)))
	mux.HandleFunc("GET /dashboard/force-release", d.confirmForce)
	mux.Handle("POST /dashboard/force-release", cop.Handler(http.HandlerFunc(d.force)))
	mux.Handle("POST /dashboard/request-release", cop.Handler(http.HandlerFunc(d.request)))
	mux.Handle("GET /dashboard/static/", http.StripPrefix("/dashboard/static/", staticHandler(static)))
	d.handler = secured(mux)
	return d, nil
}

// Register mounts the dashboard on mux: GET / and everything under
// /dashboard/. Other paths (the API, /healthz, /metrics) stay the mux's.
func (d *Dashboard) Register(mux *http.ServeMux) {
	mux.Handle("GET /{$}", d)
	mux.Handle("/dashboard/", d)
}

// ServeHTTP serves the dashboard's routes.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.handler.ServeHTTP(w, r) }

// secured sets the headers every answer of the dashboard carries: a
// content security policy that allows only the dashboard's own script,
// style and event stream, no framing, no referrer, no sniffing.
func secured(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// staticHandler serves the embedded script and style sheet; their URLs
// carry a digest of their content, so they may be cached.
func staticHandler(static fs.FS) http.Handler {
	files := http.FileServerFS(static)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400")
		files.ServeHTTP(w, r)
	})
}

// identify returns the identity of the request's token cookie. had
// reports whether there was a cookie at all (false: never logged in).
// Under InsecureNoAuth every request is the server's admin.
func (d *Dashboard) identify(r *http.Request) (id auth.Identity, ok, had bool) {
	token := ""
	if c, err := r.Cookie(tokenCookie); err == nil {
		if b, err := base64.RawURLEncoding.DecodeString(c.Value); err == nil {
			token, had = string(b), true
		}
	}
	id, ok = d.srv.Identify(token)
	return id, ok, had
}

// authOff reports whether the server takes every call without a token.
func (d *Dashboard) authOff() bool {
	_, ok := d.srv.Identify("")
	return ok
}

// setToken keeps token in the browser: HttpOnly (no script reads it),
// SameSite=Strict (no other site's page sends it), Secure over TLS, for
// the browser's session. An empty token clears the cookie.
func setToken(w http.ResponseWriter, r *http.Request, token string) {
	c := &http.Cookie{
		Name: tokenCookie, Value: base64.RawURLEncoding.EncodeToString([]byte(token)),
		Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	}
	if token == "" {
		c.Value, c.MaxAge = "", -1
	}
	http.SetCookie(w, c)
}

// csrfToken returns the request's CSRF token, setting a new one in a
// cookie if it has none. Forms repeat it; checkCSRF compares the two.
func csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 32 {
		if _, err := hex.DecodeString(c.Value); err == nil {
			return c.Value
		}
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	v := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name: csrfCookie, Value: v, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	// Later cookies in this request's handling read it from here.
	r.AddCookie(&http.Cookie{Name: csrfCookie, Value: v})
	return v
}

// checkCSRF reports whether a POST's csrf field matches its cookie.
func checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) != 32 {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostFormValue("csrf"))) == 1
}

// maxFormBytes bounds a form's body.
const maxFormBytes = 16 << 10

// parseForm reads a POST's form within maxFormBytes.
func parseForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	return r.ParseForm() == nil
}

// login takes a token from the form: a known one is kept in the cookie and
// the page follows; an unknown one gets the form again with an error.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if !parseForm(w, r) || !checkCSRF(r) {
		d.render(w, r, http.StatusForbidden, d.loginData(w, r, errStaleForm))
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if _, ok := d.srv.Identify(token); !ok || token == "" {
		d.render(w, r, http.StatusUnauthorized, d.loginData(w, r, "That token is not one of this service's tokens. Nothing is shown without one."))
		return
	}
	setToken(w, r, token)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout clears the token cookie.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	if !parseForm(w, r) || !checkCSRF(r) {
		d.render(w, r, http.StatusForbidden, d.loginData(w, r, errStaleForm))
		return
	}
	setToken(w, r, "")
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// errStaleForm is the error of a POST whose CSRF token does not match.
const errStaleForm = "The form was stale or came from another page; try again."

// render executes the page template with data, as an uncached answer.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, data *pageData) {
	data.AssetVer = d.assetVer
	var b strings.Builder
	if err := d.tmpl.ExecuteTemplate(&b, "page", data); err != nil {
		d.log.ErrorContext(r.Context(), "dashboard: render", "err", err)
		http.Error(w, "the page failed to render", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, b.String())
}
