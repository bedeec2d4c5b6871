package dashboard_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// live is how soon a change must show in an open page: the issue's "within
// a second, without a reload".
const live = time.Second

// TestDashboard drives the dashboard in headless Chromium against the lock
// service over a real etcd: each subtest in a browser context of its own
// (its own cookies), with keys of its own.
func TestDashboard(t *testing.T) {
	svc := newService(t)
	bctx := browser(t)
	alpha, beta := svc.api(alphaClient), svc.api(betaClient)

	t.Run("load the page", func(t *testing.T) {
		ctx := tab(t, bctx)
		do(t, ctx, "open the page", chromedp.Navigate(svc.url+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
		if page := html(t, ctx); strings.Contains(page, "locks-body") {
			t.Errorf("before signing in the page shows the tables:\n%s", page)
		}
		login(t, ctx, svc.url, alphaViewer, true)
		waitFor(t, ctx, 2*time.Second, "the live status", `document.getElementById("live")?.textContent.includes("Live")`)
		if !eval[bool](t, ctx, `!document.getElementById("locks-empty").hidden && document.getElementById("locks-empty").textContent.includes("curl")`) {
			t.Errorf("no lock held, and the empty state does not say how to take one:\n%s", html(t, ctx))
		}
		if who := eval[string](t, ctx, `document.getElementById("who").textContent`); !strings.Contains(who, "alpha") || !strings.Contains(who, "viewer") {
			t.Errorf("the header says %q, want tenant alpha and role viewer", who)
		}

		// On a phone the cells of a row stack as labelled lines, and
		// nothing scrolls sideways.
		k := keyFor(t, "orders/10482/charge-the-card-of-the-customer-once")
		a := acquire(t, alpha, &distlockv1.AcquireRequest{Key: k, Owner: "checkout-7f9c4b6d8-x2k9q", BusinessId: "order 10482"})
		waitFor(t, ctx, live, "the row", row("alpha", k)+" !== null")
		do(t, ctx, "a phone's viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
		waitFor(t, ctx, 2*time.Second, "no sideways scrolling at 390px", `document.documentElement.scrollWidth <= 390`)
		if d := eval[string](t, ctx, `getComputedStyle(`+row("alpha", k)+`.querySelector("td.key")).display`); d != "flex" {
			t.Errorf("on a phone a cell's display is %q, want the stacked flex", d)
		}
		do(t, ctx, "a laptop's viewport", chromedp.EmulateViewport(1280, 900))

		// Without JavaScript the same page is a static table that reloads
		// itself.
		off := tab(t, bctx)
		do(t, off, "turn scripts off", scriptsOff())
		login(t, off, svc.url, alphaViewer, false)
		page := html(t, off)
		for _, want := range []string{`data-key="alpha/` + k + `"`, "checkout-7f9c4b6d8-x2k9q", "order 10482", `http-equiv="refresh"`, "in "} {
			if !strings.Contains(page, want) {
				t.Errorf("the static page lacks %q:\n%s", want, page)
			}
		}
		k2 := keyFor(t, "later")
		a2 := acquire(t, alpha, &distlockv1.AcquireRequest{Key: k2})
		deadline := time.Now().Add(6 * time.Second)
		for !strings.Contains(html(t, off), `data-key="alpha/`+k2+`"`) {
			if time.Now().After(deadline) {
				t.Fatalf("the static page did not reload itself within 6s to show %q", k2)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if eval[bool](t, off, `typeof window.distlockDashboard !== "undefined"`) {
			t.Error("the script ran although scripts are off")
		}
		release(t, alpha, k, a.GetToken())
		release(t, alpha, k2, a2.GetToken())
	})

	t.Run("acquire through the API and see the row appear within a second", func(t *testing.T) {
		ctx := tab(t, bctx)
		login(t, ctx, svc.url, alphaViewer, true)
		k := keyFor(t, "invoice-7")
		a := acquire(t, alpha, &distlockv1.AcquireRequest{Key: k, Owner: "billing-worker-1", BusinessId: "invoice 7", Lease: durationpb.New(30 * time.Second)})
		took := waitFor(t, ctx, live, "the row of the new lock", row("alpha", k)+" !== null")
		t.Logf("the row appeared %v after the grant", took.Round(time.Millisecond))
		r := row("alpha", k)
		got := eval[[]string](t, ctx, `[...`+r+`.querySelectorAll("td")].map(c => c.textContent)`)
		text := strings.Join(got, " | ")
		for _, want := range []string{k, "billing-worker-1", "invoice 7", "in 2", " " + itoa(a.GetFence()) + " "} {
			if !strings.Contains(" "+text+" ", want) {
				t.Errorf("row %q lacks %q", text, want)
			}
		}
		if held := cell(t, ctx, "alpha", k, "since"); held != "<1s" && held != "1s" && held != "2s" {
			t.Errorf("held for %q, want about 0s", held)
		}
		release(t, alpha, k, a.GetToken())
	})

	t.Run("renew and see lease left move", func(t *testing.T) {
		ctx := tab(t, bctx)
		login(t, ctx, svc.url, alphaViewer, true)
		k := keyFor(t, "lease")
		a := acquire(t, alpha, &distlockv1.AcquireRequest{Key: k, Lease: durationpb.New(30 * time.Second)})
		waitFor(t, ctx, live, "the row", row("alpha", k)+" !== null")
		if left := cell(t, ctx, "alpha", k, "left"); !strings.HasPrefix(left, "in 2") && left != "in 30s" {
			t.Errorf("lease left %q, want in about 30s", left)
		}
		if _, err := alpha.Renew(callCtx(t), connect.NewRequest(&distlockv1.RenewRequest{Key: k, Token: a.GetToken(), Lease: durationpb.New(10 * time.Minute)})); err != nil {
			t.Fatal(err)
		}
		cond := `(() => { const c = ` + row("alpha", k) + `?.querySelector("td.left"); return !!c && (c.textContent.startsWith("in 9m") || c.textContent === "in 10m00s"); })()`
		took := waitFor(t, ctx, live, "lease left after the renewal", cond)
		t.Logf("lease left moved %v after the renewal: %s", took.Round(time.Millisecond), cell(t, ctx, "alpha", k, "left"))
		release(t, alpha, k, a.GetToken())
	})

	t.Run("a lock near its max hold is highlighted", func(t *testing.T) {
		ctx := tab(t, bctx)
		login(t, ctx, svc.url, alphaViewer, true)
		k := keyFor(t, "near-max-hold")
		acquire(t, alpha, &distlockv1.AcquireRequest{Key: k, Lease: durationpb.New(time.Minute)})
		waitFor(t, ctx, live, "the row", row("alpha", k)+" !== null")
		if b := eval[string](t, ctx, row("alpha", k)+`.querySelector("td.key").innerText`); strings.Contains(b, "max hold") {
			t.Errorf("a lock held for under 80%% of its max hold is marked: %q", b)
		}
		cond := `(() => { const r = ` + row("alpha", k) + `; return !!r && r.className === "warn" && r.querySelector("td.key").innerText.includes("near max hold 3s"); })()`
		took := waitFor(t, ctx, 4*time.Second, "the near max hold highlight", cond)
		t.Logf("highlighted %v after the grant's row showed (max hold 3s)", took.Round(time.Millisecond))
		waitFor(t, ctx, 3*time.Second, "the lock to end at its max hold", row("alpha", k)+" === null")
	})

	t.Run("permits, read-write holds and election terms show beside the locks", func(t *testing.T) {
		ctx := tab(t, bctx)
		login(t, ctx, svc.url, alphaAdmin, true)
		sem, rw, elect := keyFor(t, "exports"), keyFor(t, "catalog"), keyFor(t, "billing")
		api, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var permits []string
		for range 2 {
			p, err := alpha.AcquirePermit(api, connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: sem, Permits: 3, Owner: "exporter"}))
			if err != nil {
				t.Fatal(err)
			}
			permits = append(permits, p.Msg.GetToken())
		}
		r, err := alpha.AcquireRW(api, connect.NewRequest(&distlockv1.AcquireRWRequest{Name: rw, Owner: "reader-1"}))
		if err != nil {
			t.Fatal(err)
		}
		c, err := alpha.Campaign(api, connect.NewRequest(&distlockv1.CampaignRequest{Name: elect, Value: "10.0.0.7:8080"}))
		if err != nil {
			t.Fatal(err)
		}
		rows := func(key string) string {
			b, _ := json.Marshal(`#locks-body tr[data-key="alpha/` + key + `"]`)
			return "document.querySelectorAll(" + string(b) + ")"
		}
		waitFor(t, ctx, 2*live, "a row per permit", rows(sem)+".length === 2")
		waitFor(t, ctx, 2*live, "the reader's row", row("alpha", rw)+" !== null")
		waitFor(t, ctx, 2*live, "the leader's row", row("alpha", "election/"+elect)+" !== null")
		for key, want := range map[string]string{sem: "permit of 3", rw: "reader", "election/" + elect: "leader: 10.0.0.7:8080"} {
			if got := eval[string](t, ctx, row("alpha", key)+`.querySelector("td.key").textContent`); !strings.Contains(got, want) {
				t.Errorf("the row of %s says %q, want the badge %q", key, got, want)
			}
		}
		// A permit or a read-write hold ends at its lease: no forced release
		// is offered; an election's term is a lock, and has one.
		if eval[bool](t, ctx, row("alpha", sem)+`.querySelector("a.force") !== null`) {
			t.Error("a permit's row offers a forced release")
		}
		if !eval[bool](t, ctx, row("alpha", "election/"+elect)+`.querySelector("a.force") !== null`) {
			t.Error("the leader's row offers no forced release to a tenant admin")
		}
		for _, tok := range permits {
			if _, err := alpha.ReleasePermit(api, connect.NewRequest(&distlockv1.ReleasePermitRequest{Name: sem, Token: tok})); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := alpha.ReleaseRW(api, connect.NewRequest(&distlockv1.ReleaseRWRequest{Name: rw, Token: r.Msg.GetToken()})); err != nil {
			t.Fatal(err)
		}
		if _, err := alpha.Resign(api, connect.NewRequest(&distlockv1.ResignRequest{Name: elect, Token: c.Msg.GetToken()})); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, 2*live, "the rows gone", rows(sem)+".length === 0 && "+row("alpha", rw)+" === null && "+row("alpha", "election/"+elect)+" === null")
	})

	t.Run("release and see it go", func(t *testing.T) {
		ctx := tab(t, bctx)
		login(t, ctx, svc.url, alphaViewer, true)
		k := keyFor(t, "gone")
		a := acquire(t, alpha, &distlockv1.AcquireRequest{Key: k})
		waitFor(t, ctx, live, "the row", row("alpha", k)+" !== null")
		release(t, alpha, k, a.GetToken())
		took := waitFor(t, ctx, live, "the row to go", row("alpha", k)+" === null")
		t.Logf("the row went %v after the release", took.Round(time.Millisecond))

		// A dropped stream resumes without duplicating or missing a row:
		// the changes made while it was down show once, exactly.
		kept, dropped, added := keyFor(t, "kept"), keyFor(t, "dropped"), keyFor(t, "added")
		ak := acquire(t, alpha, &distlockv1.AcquireRequest{Key: kept})
		ad := acquire(t, alpha, &distlockv1.AcquireRequest{Key: dropped})
		waitFor(t, ctx, live, "the rows", row("alpha", kept)+" !== null && "+row("alpha", dropped)+" !== null")
		opens := eval[int](t, ctx, `window.distlockDashboard.opens`)
		svc.http.CloseClientConnections() // the browser's stream too
		svc.h2c.CloseIdleConnections()
		aa := acquire(t, alpha, &distlockv1.AcquireRequest{Key: added})
		release(t, alpha, dropped, ad.GetToken())
		if now := eval[int](t, ctx, `window.distlockDashboard.opens`); now != opens {
			t.Errorf("the stream reconnected before the changes were made (opens %d, then %d): the check below proves nothing", opens, now)
		}
		waitFor(t, ctx, 10*time.Second, "the stream to reconnect", `window.distlockDashboard.opens > `+itoa(uint64(opens)))
		waitFor(t, ctx, live, "the changes made while the stream was down",
			row("alpha", added)+" !== null && "+row("alpha", dropped)+" === null && "+row("alpha", kept)+" !== null")
		if !eval[bool](t, ctx, `(() => { const ks = [...document.querySelectorAll("#locks-body tr")].map(r => r.dataset.key); return new Set(ks).size === ks.length; })()`) {
			t.Errorf("a row shows twice after the reconnection: %v", eval[[]string](t, ctx, `[...document.querySelectorAll("#locks-body tr")].map(r => r.dataset.key)`))
		}
		release(t, alpha, kept, ak.GetToken())
		release(t, alpha, added, aa.GetToken())
	})

	t.Run("a lock that expires shows in recent expiries", func(t *testing.T) {
		ctx := tab(t, bctx)
		login(t, ctx, svc.url, alphaViewer, true)
		k := keyFor(t, "crashed-holder")
		a := acquire(t, alpha, &distlockv1.AcquireRequest{Key: k, Owner: "worker-that-died", Lease: durationpb.New(time.Second)})
		loss := `document.querySelector('#losses-body tr[data-key="alpha/` + k + `"][data-kind="expired"]')`
		took := waitFor(t, ctx, 15*time.Second, "the expiry in recent losses", loss+" !== null && "+row("alpha", k)+" === null")
		t.Logf("the expiry showed %v after the grant of a 1s lease", took.Round(time.Millisecond))
		text := eval[string](t, ctx, loss+".textContent")
		for _, want := range []string{"expired", "worker-that-died", itoa(a.GetFence())} {
			if !strings.Contains(text, want) {
				t.Errorf("the loss row %q lacks %q", text, want)
			}
		}
	})

	t.Run("a viewer of tenant A never sees tenant B's lock", func(t *testing.T) {
		ctx := tab(t, bctx)
		login(t, ctx, svc.url, alphaViewer, true)
		secret := keyFor(t, "beta-only-7c1e")
		b := acquire(t, beta, &distlockv1.AcquireRequest{Key: secret, Owner: "beta-owner"})
		marker := keyFor(t, "alpha-marker")
		m := acquire(t, alpha, &distlockv1.AcquireRequest{Key: marker})
		waitFor(t, ctx, live, "alpha's own lock", row("alpha", marker)+" !== null")
		time.Sleep(700 * time.Millisecond) // another view's worth of time
		if page := html(t, ctx); strings.Contains(page, "beta-only-7c1e") || strings.Contains(page, "beta-owner") {
			t.Errorf("alpha's viewer sees beta's lock:\n%s", page)
		}
		// Nor in the page as the server renders it, even when the viewer
		// searches for the key (the search box then holds its name).
		for _, path := range []string{"/", "/?prefix=" + secret} {
			status, body := get(t, svc.url+path, alphaViewer)
			if status != http.StatusOK || strings.Contains(body, `data-key="beta/`) || strings.Contains(body, "beta-owner") ||
				(path == "/" && strings.Contains(body, "beta-only-7c1e")) {
				t.Errorf("GET %s as alpha's viewer: %d, beta's lock shown:\n%s", path, status, body)
			}
		}
		// The lock is there: beta's client and the admin see it.
		adm := tab(t, bctx)
		login(t, adm, svc.url, opsAdmin, true)
		waitFor(t, adm, live, "beta's lock in the admin's view", row("beta", secret)+" !== null")
		release(t, beta, secret, b.GetToken())
		release(t, alpha, marker, m.GetToken())
	})

	t.Run("a wrong token sees nothing", func(t *testing.T) {
		k := keyFor(t, "not-for-strangers")
		a := acquire(t, alpha, &distlockv1.AcquireRequest{Key: k})
		ctx := tab(t, bctx)
		do(t, ctx, "sign in with a wrong token",
			chromedp.Navigate(svc.url+"/"),
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SetValue(chromedp.CSS("#token"), "not-a-token-of-this-service"),
			chromedp.Click(chromedp.CSS("#login")),
			chromedp.WaitVisible(chromedp.CSS("#error")),
		)
		page := html(t, ctx)
		if !strings.Contains(page, `id="login-form"`) || strings.Contains(page, "locks-body") || strings.Contains(page, "dash/") {
			t.Errorf("a wrong token's page shows more than the login form and an error:\n%s", page)
		}
		if strings.Contains(page, "not-a-token-of-this-service") {
			t.Error("the page echoes the token")
		}
		// No cookie came of it: the page is still the form.
		do(t, ctx, "reload", chromedp.Navigate(svc.url+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
		// A forged cookie gets the form and an error, the stream nothing.
		status, body := get(t, svc.url+"/", "forged-token-000000000")
		if status != http.StatusUnauthorized || !strings.Contains(body, `id="login-form"`) || strings.Contains(body, "dash/") {
			t.Errorf("GET / with a forged cookie: %d\n%s", status, body)
		}
		for _, tok := range []string{"forged-token-000000000", ""} {
			if status, body := get(t, svc.url+"/dashboard/events", tok); status != http.StatusUnauthorized || strings.Contains(body, "dash/") {
				t.Errorf("the event stream with token %q: %d %q", tok, status, body)
			}
		}
		release(t, alpha, k, a.GetToken())
	})

	t.Run("ask the holder from the page: it is told and keeps the lock", func(t *testing.T) {
		k := keyFor(t, "long-report")
		rb, err := remotelock.New(nil, svc.url, remotelock.WithToken(alphaClient), remotelock.WithLossWatch())
		if err != nil {
			t.Fatal(err)
		}
		holder := distlock.New(rb)
		defer func() {
			if err := holder.Close(); err != nil {
				t.Errorf("holder close: %v", err)
			}
		}()
		l, err := holder.Lock(callCtx(t), k, distlock.WithOwner("report-runner"))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Release(callCtx(t)) }()
		ctx := tab(t, bctx)
		login(t, ctx, svc.url, opsAdmin, true)
		waitFor(t, ctx, live, "the holder's row", row("alpha", k)+" !== null")
		const reason = "deploy 4813 at 02:00"
		do(t, ctx, "ask from the page",
			chromedp.Click(chromedp.CSS(`tr[data-key="alpha/`+k+`"] a.force`)),
			chromedp.WaitVisible(chromedp.CSS("#reason")),
			chromedp.SetValue(chromedp.CSS("#reason"), reason),
			chromedp.Click(chromedp.CSS("#ask")),
			chromedp.WaitVisible(chromedp.CSS("#notice")),
		)
		if page := html(t, ctx); !strings.Contains(page, "Asked the holder of alpha/"+k) {
			t.Errorf("the page does not say the holder was asked:\n%s", page)
		}
		select {
		case <-l.ReleaseRequested():
			if l.ReleaseReason() != reason || l.Err() != nil {
				t.Errorf("the holder was told %q and has %v, want %q and its lock", l.ReleaseReason(), l.Err(), reason)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the holder was not told within 10s")
		}
		waitFor(t, ctx, live, "the lock still held", row("alpha", k)+" !== null")
		var found bool
		for _, r := range svc.logs.records(t, "release requested") {
			if r["key"] == k {
				found = r["reason"] == reason && r["target_tenant"] == "alpha" && r["tenant"] == "ops" && r["held"] == true
			}
		}
		if !found {
			t.Errorf("no audit record of the request for %q by ops:\n%s", k, svc.logs)
		}
	})
	t.Run("force-release as admin removes the lock and the holder's client is told", func(t *testing.T) {
		k := keyFor(t, "stuck-report")
		rb, err := remotelock.New(nil, svc.url, remotelock.WithToken(alphaClient), remotelock.WithLossWatch())
		if err != nil {
			t.Fatal(err)
		}
		holder := distlock.New(rb)
		defer func() {
			if err := holder.Close(); err != nil {
				t.Errorf("holder close: %v", err)
			}
		}()
		l, err := holder.Lock(callCtx(t), k, distlock.WithOwner("report-runner"), distlock.WithBusinessID("nightly report"))
		if err != nil {
			t.Fatal(err)
		}
		ctx := tab(t, bctx)
		login(t, ctx, svc.url, opsAdmin, true)
		waitFor(t, ctx, live, "the holder's row", row("alpha", k)+" !== null")
		const reason = "the report hung after deploy 4812"
		do(t, ctx, "force release from the page",
			chromedp.Click(chromedp.CSS(`tr[data-key="alpha/`+k+`"] a.force`)),
			chromedp.WaitVisible(chromedp.CSS("#reason")),
		)
		if page := html(t, ctx); !strings.Contains(page, "report-runner") || !strings.Contains(page, "Force-release") {
			t.Errorf("the confirmation does not say what it releases:\n%s", page)
		}
		do(t, ctx, "confirm with a reason",
			chromedp.SetValue(chromedp.CSS("#reason"), reason),
			chromedp.Click(chromedp.CSS("#confirm")),
			chromedp.WaitVisible(chromedp.CSS("#notice")),
		)
		waitFor(t, ctx, live, "the lock to go", row("alpha", k)+" === null")
		waitFor(t, ctx, live, "the forced release in recent losses",
			`document.querySelector('#losses-body tr[data-key="alpha/`+k+`"][data-kind="force released"]')?.textContent.includes(`+quote(reason)+`)`)
		select {
		case <-l.Done():
			if !errors.Is(l.Err(), distlock.ErrLockLost) {
				t.Errorf("the holder's lock ended with %v, want ErrLockLost", l.Err())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the holder was not told within 10s")
		}
		var found bool
		for _, r := range svc.logs.records(t, "force release") {
			if r["key"] == k {
				found = true
				if r["reason"] != reason || r["target_tenant"] != "alpha" || r["tenant"] != "ops" || r["held"] != true {
					t.Errorf("audit record %v, want reason %q, target tenant alpha, by ops, held", r, reason)
				}
			}
		}
		if !found {
			t.Errorf("no audit record of the forced release of %q:\n%s", k, svc.logs)
		}
		if strings.Contains(svc.logs.String(), opsAdmin) {
			t.Error("the log holds the admin's token")
		}
	})
}

// scriptsOff is a step that disables the page's scripts.
func scriptsOff() chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return chromedp.Void{}, err
	}
}

// get fetches url with token in the dashboard's cookie (none if empty),
// reading at most 64 KiB within 3 seconds: enough to see what an event
// stream sends first.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.AddCookie(&http.Cookie{Name: "distlock_token", Value: base64.RawURLEncoding.EncodeToString([]byte(token))})
	}
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10)) // a stream ends at the timeout
	return res.StatusCode, string(b)
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// quote is s as a JavaScript string literal.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// TestReleasedNoticeNotForged: a link to the dashboard with ?released=
// and any text, sent to an operator, must not put that text on the page as
// if the service said it; only the redirect after the operator's own force
// release shows its notice.
func TestReleasedNoticeNotForged(t *testing.T) {
	s := newService(t)
	forged := "jobs/x. URGENT: the service moved, sign in at evil.example"
	code, body := get(t, s.url+"/?released="+url.QueryEscape(forged), opsAdmin)
	if code != http.StatusOK {
		t.Fatalf("GET /: %d", code)
	}
	if strings.Contains(body, "evil.example") {
		t.Errorf("the page shows text from its link as the service's notice")
	}

	// The operator's own release still says so, after the redirect.
	key := keyFor(t, "released")
	g := acquire(t, s.api(alphaClient), &distlockv1.AcquireRequest{Key: key, Lease: durationpb.New(time.Minute)})
	status, page := forceByForm(t, s, opsAdmin, "alpha", key, g.GetFence())
	if status != http.StatusOK || !strings.Contains(page, "Force-released alpha/"+key) {
		t.Errorf("after the operator's own force release: HTTP %d, and the page has no notice of it", status)
	}
}

// A tenant admin's dashboard offers to force-release its own tenant's locks,
// and the release of another tenant's key is refused, the key still held.
func TestTenantAdminDashboard(t *testing.T) {
	s := newService(t)
	key := keyFor(t, "k")
	acquire(t, s.api(alphaClient), &distlockv1.AcquireRequest{Key: key, Lease: durationpb.New(time.Minute)})
	g := acquire(t, s.api(betaClient), &distlockv1.AcquireRequest{Key: key, Lease: durationpb.New(time.Minute)})
	if code, body := get(t, s.url+"/", alphaAdmin); code != http.StatusOK || !strings.Contains(body, `data-force="1"`) {
		t.Errorf("a tenant admin's dashboard: HTTP %d, force-release links offered: %v", code, strings.Contains(body, `data-force="1"`))
	}
	if code, body := get(t, s.url+"/", alphaClient); code != http.StatusOK || strings.Contains(body, `data-force="1"`) {
		t.Errorf("a client's dashboard: HTTP %d, force-release links offered: %v", code, strings.Contains(body, `data-force="1"`))
	}
	if status, page := forceByForm(t, s, alphaAdmin, "beta", key, g.GetFence()); status != http.StatusForbidden || !strings.Contains(page, "only its own tenant") {
		t.Errorf("a tenant admin's release of another tenant's key: HTTP %d", status)
	}
	res, err := s.api(betaClient).Inspect(callCtx(t), connect.NewRequest(&distlockv1.InspectRequest{Key: key}))
	if err != nil || !res.Msg.GetLock().GetHeld() {
		t.Errorf("the other tenant's key after the refused release: %v, %v", res, err)
	}
}

// forceByForm force-releases tenant's key held with fence through the
// dashboard's two forms, signed in with token, and returns the final page.
func forceByForm(t *testing.T, s *service, token, tenant, key string, fence uint64) (int, string) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(s.url)
	jar.SetCookies(base, []*http.Cookie{{Name: "distlock_token", Value: base64.RawURLEncoding.EncodeToString([]byte(token))}})
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	q := url.Values{"tenant": {tenant}, "key": {key}, "fence": {itoa(fence)}}
	res, err := hc.Get(s.url + "/dashboard/force-release?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	form, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindSubmatch(form)
	if m == nil {
		t.Fatalf("no CSRF field in the confirmation page:\n%s", form)
	}
	q.Set("csrf", string(m[1]))
	q.Set("reason", "test")
	q.Set("confirm", "yes")
	res, err = hc.PostForm(s.url+"/dashboard/force-release", q)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	return res.StatusCode, string(page)
}

// Keys that look alike but differ (a zero-width space, NFD against NFC)
// show apart, escaped, on the page and in its event stream; the link that
// names the key back still carries the key itself.
func TestLookalikeKeysShowApart(t *testing.T) {
	s := newService(t)
	prefix := keyFor(t, "")
	for _, k := range []string{"ab", "a\u200bb", "café", "cafe\u0301"} {
		acquire(t, s.api(alphaClient), &distlockv1.AcquireRequest{Key: prefix + k, Lease: durationpb.New(time.Minute)})
	}
	var page string
	for deadline := time.Now().Add(5 * time.Second); strings.Count(page, `data-label="Key" class="key"`) < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("the four locks are not on the page within 5s:\n%s", page)
		}
		time.Sleep(50 * time.Millisecond)
		_, page = get(t, s.url+"/?prefix="+url.QueryEscape(prefix), alphaClient)
	}
	for _, want := range []string{`a\u{200B}b`, `cafe\u{0301}`, "café<", "ab<"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not show %q", want)
		}
	}
	_, stream := get(t, s.url+"/dashboard/events?prefix="+url.QueryEscape(prefix), alphaClient)
	for _, want := range []string{`"shown":"` + prefix + `a\\u{200B}b"`, `"key":"` + prefix + "a\u200bb" + `"`} {
		if !strings.Contains(stream, want) {
			t.Errorf("the event stream has no %s", want)
		}
	}
}
