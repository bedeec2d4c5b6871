package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/auth"
)

// A forced release takes two steps, with or without JavaScript: the row's
// link (GET /dashboard/force-release?tenant=T&key=K&fence=F) shows what
// would be released and asks for a reason; the form's POST, with the CSRF
// token and confirm=yes, releases it through server.ForceReleaseAs, which
// refuses if the key is no longer held with that fence.

// maxReasonLen bounds a reason as the API does.
const maxReasonLen = 1024

// A request to release takes the same two steps: the confirmation page's
// second button posts the form to /dashboard/request-release, which asks
// the holder through server.RequestReleaseAs.

// confirmForce serves the confirmation page of a forced release.
func (d *Dashboard) confirmForce(w http.ResponseWriter, r *http.Request) {
	id, ok := d.admin(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	fence, _ := strconv.ParseUint(q.Get("fence"), 10, 64)
	c := &confirmData{Tenant: q.Get("tenant"), Key: q.Get("key"), Fence: fence}
	d.renderConfirm(w, r, id, c, http.StatusOK, "")
}

// force serves the confirmed POST of a forced release.
func (d *Dashboard) force(w http.ResponseWriter, r *http.Request) {
	id, c, ok := d.confirmation(w, r)
	if !ok {
		return
	}
	switch {
	case r.PostFormValue("confirm") != "yes":
		d.renderConfirm(w, r, id, c, http.StatusBadRequest, "Confirm the release with the button.")
		return
	case c.Reason == "":
		d.renderConfirm(w, r, id, c, http.StatusBadRequest, "Give a reason: the audit log records it.")
		return
	case len(c.Reason) > maxReasonLen:
		d.renderConfirm(w, r, id, c, http.StatusBadRequest, "The reason is too long (at most 1024 bytes).")
		return
	}
	released, err := d.srv.ForceReleaseAs(r.Context(), id, c.Tenant, c.Key, c.Reason, c.Fence)
	if err != nil {
		d.renderConfirm(w, r, id, c, statusOf(err), "Nothing was released: "+connectMessage(err))
		return
	}
	if !released {
		d.renderConfirm(w, r, id, c, http.StatusConflict, "The key was free already: nothing was released.")
		return
	}
	target := c.Tenant + "/" + c.Key
	http.Redirect(w, r, "/?released="+url.QueryEscape(target)+"&proof="+noticeProof(r, "released", target), http.StatusSeeOther)
}

// confirmation reads the POST of a confirmation page: an admin's, with a
// valid CSRF token. Otherwise it answers with a refusal, and false.
func (d *Dashboard) confirmation(w http.ResponseWriter, r *http.Request) (auth.Identity, *confirmData, bool) {
	id, ok := d.admin(w, r)
	if !ok {
		return id, nil, false
	}
	if !parseForm(w, r) || !checkCSRF(r) {
		d.render(w, r, http.StatusForbidden, d.loginData(w, r, errStaleForm))
		return id, nil, false
	}
	fence, _ := strconv.ParseUint(r.PostFormValue("fence"), 10, 64)
	return id, &confirmData{
		Tenant: r.PostFormValue("tenant"), Key: r.PostFormValue("key"), Fence: fence,
		Reason: strings.TrimSpace(r.PostFormValue("reason")),
	}, true
}

// request serves the confirmed POST of a request to release.
func (d *Dashboard) request(w http.ResponseWriter, r *http.Request) {
	id, c, ok := d.confirmation(w, r)
	if !ok {
		return
	}
	switch {
	case c.Reason == "":
		d.renderConfirm(w, r, id, c, http.StatusBadRequest, "Give a reason: the holder is told it.")
		return
	case len(c.Reason) > distlock.MaxRequestReason:
		d.renderConfirm(w, r, id, c, http.StatusBadRequest, fmt.Sprintf("The reason is too long to ask with (at most %d bytes).", distlock.MaxRequestReason))
		return
	}
	asked, err := d.srv.RequestReleaseAs(r.Context(), id, c.Tenant, c.Key, c.Reason, c.Fence)
	if err != nil {
		d.renderConfirm(w, r, id, c, statusOf(err), "Nobody was asked: "+connectMessage(err))
		return
	}
	if !asked {
		d.renderConfirm(w, r, id, c, http.StatusConflict, "The key was free already: nobody was asked.")
		return
	}
	target := c.Tenant + "/" + c.Key
	http.Redirect(w, r, "/?asked="+url.QueryEscape(target)+"&proof="+noticeProof(r, "asked", target), http.StatusSeeOther)
}

// statusOf is the HTTP status of a refused dashboard call.
func statusOf(err error) int {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument:
		return http.StatusBadRequest
	case connect.CodeFailedPrecondition:
		return http.StatusConflict
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusBadGateway
}

// noticeProof is what the redirect after a forced release (kind
// "released") or a request to release ("asked") of target carries for the
// page to show its notice: a MAC of kind and target under this browser's
// CSRF secret, which no other site can read (an HttpOnly, SameSite=Strict
// cookie), so that a link with ?released=<any text> shows nothing. "" without
// the cookie.
func noticeProof(r *http.Request, kind, target string) string {
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(c.Value))
	m.Write([]byte("distlock-" + kind + "\x00" + target))
	return hex.EncodeToString(m.Sum(nil))
}

// admin returns the request's identity if it is an admin's; otherwise it
// answers with the login form or a refusal, and false.
func (d *Dashboard) admin(w http.ResponseWriter, r *http.Request) (auth.Identity, bool) {
	id, ok, _ := d.identify(r)
	switch {
	case !ok:
		d.render(w, r, http.StatusUnauthorized, d.loginData(w, r, "Sign in with an admin token to force-release a lock."))
		return id, false
	case !id.Role.Allows(auth.Force):
		data := d.dashboardData(w, r, id, "")
		data.Error = "Only an admin or tenant-admin token may force-release a lock; this one is a " + id.Role.String() + "'s."
		d.render(w, r, http.StatusForbidden, data)
		return id, false
	}
	return id, true
}

// renderConfirm shows the confirmation page, with the hold as the monitor
// knows it.
func (d *Dashboard) renderConfirm(w http.ResponseWriter, r *http.Request, id auth.Identity, c *confirmData, status int, msg string) {
	if c.Tenant == "" {
		c.Tenant = id.Tenant
	}
	v := d.view(r.Context(), id, c.Key)
	for i, l := range v.Locks {
		if l.Tenant == c.Tenant && l.Key == c.Key {
			c.Lock = &v.Locks[i]
			if c.Fence == 0 {
				c.Fence = l.Fence
			}
			break
		}
	}
	data := d.dashboardData(w, r, id, "")
	data.Title = "distlock: force release"
	data.Confirm = c
	data.Error = msg
	d.render(w, r, status, data)
}

// connectMessage is err's message without its code.
func connectMessage(err error) string {
	if ce, ok := err.(*connect.Error); ok {
		return ce.Message()
	}
	return err.Error()
}
