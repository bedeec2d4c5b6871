package dashboard

import (
	"context"
	"crypto/hmac"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
)

// pageData is what the page template renders: the login form (Login), the
// confirmation of a forced release (Confirm), or the dashboard.
type pageData struct {
	Title    string
	AssetVer string
	CSRF     string
	Error    string
	Notice   string

	Login   bool
	Confirm *confirmData

	// The dashboard, as of Now.
	Now    time.Time
	Tenant string
	Role   string
	Admin  bool // sees every tenant
	// CanForce shows force-release links: an admin's, or a tenant admin's
	// of its own tenant.
	CanForce bool
	AuthOff  bool
	Prefix   string
	Events   string // the event stream's URL
	Refresh  string // the meta refresh without JavaScript
	Curl     string // the empty state's example
	View     server.View
}

// confirmData is the confirmation of a forced release.
type confirmData struct {
	Tenant, Key string
	Fence       uint64
	Lock        *server.HeldLock // the hold as the monitor knows it; nil if unknown
	Reason      string
}

// page serves GET /: the dashboard for a known token, else the login form.
func (d *Dashboard) page(w http.ResponseWriter, r *http.Request) {
	id, ok, had := d.identify(r)
	if !ok {
		msg := ""
		status := http.StatusOK
		if had {
			setToken(w, r, "")
			msg = "The token this browser had is no longer one of this service's tokens: enter a current one."
			status = http.StatusUnauthorized
		}
		d.render(w, r, status, d.loginData(w, r, msg))
		return
	}
	prefix := r.URL.Query().Get("prefix")
	if len(prefix) > maxPrefixLen {
		prefix = prefix[:maxPrefixLen]
	}
	data := d.dashboardData(w, r, id, prefix)
	q := r.URL.Query()
	proof := []byte(q.Get("proof"))
	switch k, a := q.Get("released"), q.Get("asked"); {
	case k != "" && len(proof) > 0 && hmac.Equal(proof, []byte(noticeProof(r, "released", k))):
		data.Notice = "Force-released " + k + ". Its holder learns at its next renewal (or at once, if it watches its locks); the audit log has the reason."
	case a != "" && len(proof) > 0 && hmac.Equal(proof, []byte(noticeProof(r, "asked", a))):
		data.Notice = "Asked the holder of " + a + " to release it. It learns at once if it watches its locks, else at its next renewal, and keeps the lock until it releases it; the audit log has the reason."
	}
	d.render(w, r, http.StatusOK, data)
}

// loginData is the login form with an error (or none).
func (d *Dashboard) loginData(w http.ResponseWriter, r *http.Request, msg string) *pageData {
	return &pageData{Title: "distlock: sign in", Login: true, Error: msg, CSRF: csrfToken(w, r)}
}

// dashboardData is the dashboard of id under prefix.
func (d *Dashboard) dashboardData(w http.ResponseWriter, r *http.Request, id auth.Identity, prefix string) *pageData {
	v := d.view(r.Context(), id, prefix)
	events := "/dashboard/events"
	refresh := "2; url=/"
	if prefix != "" {
		refresh += "?prefix=" + url.QueryEscape(prefix)
	}
	return &pageData{Refresh: refresh,
		Title: "distlock: locks", CSRF: csrfToken(w, r), Now: time.Now(),
		Tenant: id.Tenant, Role: id.Role.String(), Admin: v.AllTenants, CanForce: id.Role.Allows(auth.Force), AuthOff: d.authOff(),
		Prefix: prefix, Events: events, Curl: curlLine(r, d.addr, d.authOff()), View: v,
	}
}

// firstPollWait bounds how long a page waits for the monitor's first poll.
const firstPollWait = 2 * time.Second

// view is the monitor's view for id under prefix. If the monitor has just
// started (no page was open), it waits for its first poll, within
// firstPollWait, so that a page never says "no locks" only because nobody
// looked yet.
func (d *Dashboard) view(ctx context.Context, id auth.Identity, prefix string) server.View {
	v, changed := d.srv.Monitor(id, prefix)
	if !v.Polled.IsZero() || v.PollErr != nil {
		return v
	}
	t := time.NewTimer(firstPollWait)
	defer t.Stop()
	for range 8 { // each change before the poll (a grant, a wait) wakes it
		select {
		case <-changed:
		case <-t.C:
			return v
		case <-ctx.Done():
			return v
		case <-d.srv.Stopping():
			return v
		}
		if v, changed = d.srv.Monitor(id, prefix); !v.Polled.IsZero() || v.PollErr != nil {
			return v
		}
	}
	return v
}

// curlLine is a command that takes a lock through the API of the service
// at addr, which the page came from.
func curlLine(r *http.Request, addr string, authOff bool) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	bearer := ` -H "Authorization: Bearer $TOKEN"`
	if authOff {
		bearer = ""
	}
	return fmt.Sprintf(`curl -sS -H 'Content-Type: application/json'%s -d '{"key":"demo","lease":"30s"}' %s://%s/distlock.v1.LockService/Acquire`,
		bearer, scheme, addr)
}

// funcs are the template's functions: the same formatting the script does.
var funcs = template.FuncMap{
	"ago":       func(now, t time.Time) string { return human(now.Sub(t)) + " ago" },
	"heldFor":   heldFor,
	"leaseLeft": leaseLeft,
	"lockClass": lockClass,
	"holdBadge": holdBadge,
	"forcible":  forcible,
	"nearMax":   nearMaxHold,
	"dur":       func(d time.Duration) string { return human(d) },
	"wait":      waitTime,
	"key":       keyHTML,
	"shown":     shownKey,
	"rfc3339":   func(t time.Time) string { return rfc3339(t) },
	"ms":        func(d time.Duration) int64 { return d.Milliseconds() },
	"fence":     func(f uint64) string { return strconv.FormatUint(f, 10) },
	"plural": func(n int, one, many string) string {
		if n == 1 {
			return one
		}
		return many
	},
}

// rfc3339 is t for the script, or "" for the zero time.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// human is a duration as people read it: "4s", "3m12s", "2h05m", "3d04h";
// "<1s" under a second. The script's human() is the same.
func human(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	s := int64(d / time.Second)
	switch {
	case d < time.Second:
		return "<1s"
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// waitTime is a wait as people read it: "640ms" and "1.2s" under ten
// seconds, else as human. The script's waitTime() is the same.
func waitTime(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return human(d)
}

// keyHTML is a key as shownKey shows it, HTML-escaped, with a line break
// opportunity after each slash, so that long keys wrap at their path
// separators.
func keyHTML(key string) template.HTML {
	parts := strings.Split(shownKey(key), "/")
	for i, p := range parts {
		parts[i] = template.HTMLEscapeString(p)
	}
	return template.HTML(strings.Join(parts, "/<wbr>"))
}

// heldFor is how long a lock has been held, or "?" if unknown.
func heldFor(now time.Time, l server.HeldLock) string {
	if l.Since.IsZero() {
		return "?"
	}
	return human(now.Sub(l.Since))
}

// leaseLeft is the time to a lock's expiry: "in 4s", or "expiring" once
// it is due and the store has not yet dropped it.
func leaseLeft(now time.Time, l server.HeldLock) string {
	left := l.Expires.Sub(now)
	if left <= 0 {
		return "expiring"
	}
	return "in " + human(left)
}

// lowLeaseShare is the share of its lease below which a lock's lease left
// is highlighted: a renewing holder (every third of the lease) never gets
// there.
const lowLeaseShare = 0.2

// nearMaxHoldShare is the share of its max hold past which a lock is
// highlighted: its holder is soon made to let go.
const nearMaxHoldShare = 0.8

// nearMaxHold reports whether l has been held for most of its max hold.
func nearMaxHold(now time.Time, l server.HeldLock) bool {
	return l.MaxHold > 0 && !l.Since.IsZero() && float64(now.Sub(l.Since)) >= nearMaxHoldShare*float64(l.MaxHold)
}

// lockClass is a held lock's row class: "fail" with failing renewals,
// "warn" with under a fifth of its lease left or near its max hold, else
// "".
func lockClass(now time.Time, l server.HeldLock) string {
	switch {
	case l.RenewFailing:
		return "fail"
	case l.Lease > 0 && float64(l.Expires.Sub(now)) < lowLeaseShare*float64(l.Lease), nearMaxHold(now, l):
		return "warn"
	}
	return ""
}

// holdBadge names what a row holds when it is not a plain lock: an
// election's leader and its value, a semaphore's permit, a read-write
// lock's reader or writer; "" for a lock.
func holdBadge(l server.HeldLock) string {
	switch l.Kind {
	case server.HoldLeader:
		return "leader: " + shownKey(l.Value)
	case server.HoldPermit:
		return fmt.Sprintf("permit of %d", l.Permits)
	case server.HoldRead:
		return "reader"
	case server.HoldWrite:
		return "writer"
	}
	return ""
}

// forcible reports whether a row's hold can be force-released: a lock's or
// an election term's. (A permit or a read-write hold ends at its lease.)
func forcible(l server.HeldLock) bool {
	return l.Kind == server.HoldLock || l.Kind == server.HoldLeader
}
