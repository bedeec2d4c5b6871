package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/server"
)

// Event stream timings.
const (
	minGap    = 500 * time.Millisecond // at most one view per minGap
	heartbeat = 15 * time.Second       // a comment when nothing changed, to find a dead stream (and keep the monitor on)
	staleMax  = 3 * time.Second        // a view whose last good poll is older says so
	retryMs   = 1000                   // EventSource's reconnection delay
)

// wireView is a view as the script reads it. Fences are strings (64-bit),
// times RFC 3339 ("" unknown), durations milliseconds.
type wireView struct {
	Tenant    string          `json:"tenant"`
	All       bool            `json:"all"`
	Stale     bool            `json:"stale"`
	Error     string          `json:"error,omitempty"`
	Locks     []wireLock      `json:"locks"`
	More      int             `json:"more"`
	Contended []wireContended `json:"contended"`
	Losses    []wireLoss      `json:"losses"`
}

// The wire forms carry a key as it is (key), to name it back, and as the
// page shows it (shown: see shownKey).

type wireLock struct {
	Tenant     string `json:"tenant"`
	Key        string `json:"key"`
	Shown      string `json:"shown"`
	Owner      string `json:"owner"`
	BusinessID string `json:"businessId"`
	Fence      string `json:"fence"`
	Since      string `json:"since"`
	Expires    string `json:"expires"`
	LeaseMs    int64  `json:"leaseMs"`
	Waiters    int    `json:"waiters"`
	Failing    bool   `json:"failing"`
	Session    bool   `json:"session"`
	MaxHoldMs  int64  `json:"maxHoldMs"`
	Kind       string `json:"kind,omitempty"` // holdBadge's text
	Forcible   bool   `json:"forcible"`
}

type wireContended struct {
	Tenant  string `json:"tenant"`
	Key     string `json:"key"`
	Shown   string `json:"shown"`
	Waiters int    `json:"waiters"`
	Waited  int    `json:"waited"`
	GaveUp  int    `json:"gaveUp"`
	TotalMs int64  `json:"totalMs"`
	MaxMs   int64  `json:"maxMs"`
}

type wireLoss struct {
	Kind       string `json:"kind"`
	Tenant     string `json:"tenant"`
	Key        string `json:"key"`
	Shown      string `json:"shown"`
	Owner      string `json:"owner"`
	BusinessID string `json:"businessId"`
	Fence      string `json:"fence"`
	At         string `json:"at"`
	Reason     string `json:"reason"`
	By         string `json:"by"`
}

// wire converts v; stale says whether its last good poll is too old.
func wire(v server.View, now time.Time) wireView {
	w := wireView{
		Tenant: v.Tenant, All: v.AllTenants, More: v.More,
		Stale:     v.PollErr != nil || v.Polled.IsZero() || now.Sub(v.Polled) > staleMax,
		Locks:     make([]wireLock, 0, len(v.Locks)),
		Contended: make([]wireContended, 0, len(v.Contended)),
		Losses:    make([]wireLoss, 0, len(v.Losses)),
	}
	if v.PollErr != nil {
		w.Error = "the store does not answer: " + v.PollErr.Error()
	}
	for _, l := range v.Locks {
		w.Locks = append(w.Locks, wireLock{
			Tenant: l.Tenant, Key: l.Key, Shown: shownKey(l.Key), Owner: shownKey(l.Owner), BusinessID: shownKey(l.BusinessID),
			Fence: strconv.FormatUint(l.Fence, 10), Since: rfc3339(l.Since), Expires: rfc3339(l.Expires),
			LeaseMs: l.Lease.Milliseconds(), Waiters: l.Waiters, Failing: l.RenewFailing, Session: l.Session,
			MaxHoldMs: l.MaxHold.Milliseconds(), Kind: holdBadge(l), Forcible: forcible(l),
		})
	}
	for _, c := range v.Contended {
		w.Contended = append(w.Contended, wireContended{
			Tenant: c.Tenant, Key: c.Key, Shown: shownKey(c.Key), Waiters: c.Waiters, Waited: c.Waited, GaveUp: c.GaveUp,
			TotalMs: c.TotalWait.Milliseconds(), MaxMs: c.MaxWait.Milliseconds(),
		})
	}
	for _, l := range v.Losses {
		fence := ""
		if l.Fence != 0 {
			fence = strconv.FormatUint(l.Fence, 10)
		}
		w.Losses = append(w.Losses, wireLoss{
			Kind: string(l.Kind), Tenant: l.Tenant, Key: l.Key, Shown: shownKey(l.Key), Owner: shownKey(l.Owner), BusinessID: shownKey(l.BusinessID),
			Fence: fence, At: rfc3339(l.At), Reason: l.Reason, By: l.By,
		})
	}
	return w
}

// events serves GET /dashboard/events?prefix=P: server-sent events, each
// message the whole view ({"now": ..., "view": ...}), sent when it changed
// and at most every minGap. The stream ends at the server's Shutdown, and
// with an "logout" event when the cookie's token stops being valid (the
// token file was reloaded without it).
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	id, ok, _ := d.identify(r)
	if !ok {
		http.Error(w, "no valid token: sign in at /", http.StatusUnauthorized)
		return
	}
	select {
	case <-d.srv.Stopping():
		http.Error(w, "the service is shutting down", http.StatusServiceUnavailable)
		return
	default:
	}
	prefix := r.URL.Query().Get("prefix")
	if len(prefix) > maxPrefixLen {
		prefix = prefix[:maxPrefixLen]
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	ctx := r.Context()
	send := func(s string) bool {
		if _, err := fmt.Fprint(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(fmt.Sprintf("retry: %d\n\n", retryMs)) {
		return
	}
	d.view(ctx, id, prefix) // the first message after the monitor's first poll
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	var last []byte
	var lastSent time.Time
	for {
		if id, ok, _ = d.identify(r); !ok {
			send("event: logout\ndata: {}\n\n")
			return
		}
		v, changed := d.srv.Monitor(id, prefix)
		now := time.Now()
		body, err := json.Marshal(wire(v, now))
		if err != nil {
			d.log.ErrorContext(ctx, "dashboard: encode a view", "err", err)
			return
		}
		if !bytes.Equal(body, last) {
			msg := fmt.Sprintf("data: {\"now\":%q,\"view\":%s}\n\n", rfc3339(now), body)
			if !send(msg) {
				return
			}
			last, lastSent = body, now
		}
		select {
		case <-ctx.Done():
			return
		case <-d.srv.Stopping():
			return
		case <-changed:
		case <-beat.C:
			if !send(": ping\n\n") {
				return
			}
		}
		if wait := time.Until(lastSent.Add(minGap)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-d.srv.Stopping():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}
