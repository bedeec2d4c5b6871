package dashboard_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// screenshotEnv, set to 1, makes TestDashboardScreenshot write the
// README's screenshot, docs/dashboard.png.
const screenshotEnv = "DISTLOCK_SCREENSHOT"

// TestDashboardScreenshot builds a realistic scene (a dozen locks over two
// tenants, waiters queued on two keys, waits that ended, a lock near the
// end of its lease, one expired, one force-released, a refused renewal),
// checks that the admin's page shows all of it, and with
// DISTLOCK_SCREENSHOT=1 writes the screenshot to docs/dashboard.png.
func TestDashboardScreenshot(t *testing.T) {
	svc := newService(t)
	bctx := browser(t)
	alpha, beta, admin := svc.api(alphaClient), svc.api(betaClient), svc.api(opsAdmin)
	// The page is open before the scene begins: the monitor sees expiries
	// only while a page is open.
	ctx := tab(t, bctx)
	do(t, ctx, "a laptop's viewport", chromedp.EmulateViewport(1280, 900))
	login(t, ctx, svc.url, opsAdmin, true)

	type lock struct {
		api               distlockv1connect.LockServiceClient
		key, owner, busID string
		lease             time.Duration
	}
	held := []lock{
		{alpha, "orders/10482/charge", "checkout-7f9c4-x2k9q", "order 10482", time.Minute},
		{alpha, "orders/10483/charge", "checkout-7f9c4-m81vd", "order 10483", time.Minute},
		{alpha, "inventory/sku-88412", "stock-sync-1", "SKU 88412 recount", 2 * time.Minute},
		{alpha, "payouts/settle-eu", "settlement-0", "batch 2026-11-30 EU", 5 * time.Minute},
		{alpha, "reports/nightly-revenue", "cron@worker-3", "nightly report", 10 * time.Minute},
		{alpha, "search/reindex-products", "indexer-2", "reindex 5521", 3 * time.Minute},
		{beta, "tickets/LH453/seat-14C", "booking-api-5", "flight LH453 seat 14C", time.Minute},
		{beta, "tickets/LH453/seat-14D", "booking-api-2", "flight LH453 seat 14D", time.Minute},
		{beta, "jobs/email-digest", "cron@mailer-1", "daily digest", 15 * time.Minute},
		{beta, "migrations/schema", "deploy-4812", "migration 0042", 10 * time.Minute},
	}
	for _, l := range held {
		acquire(t, l.api, &distlockv1.AcquireRequest{Key: l.key, Owner: l.owner, BusinessId: l.busID, Lease: durationpb.New(l.lease)})
	}

	// Waits that ended: a ledger entry handed from one writer to the next.
	ledger := "ledger/account-5531"
	first := acquire(t, beta, &distlockv1.AcquireRequest{Key: ledger, Owner: "ledger-writer-1", BusinessId: "transfer 88", Lease: durationpb.New(time.Minute)})
	var wg sync.WaitGroup
	waitCtx, stopWaiting := context.WithCancel(context.Background())
	defer func() {
		stopWaiting()
		wg.Wait()
	}()
	waiter := func(api distlockv1connect.LockServiceClient, key, owner string, wait time.Duration, got chan<- error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := api.Acquire(waitCtx, connect.NewRequest(&distlockv1.AcquireRequest{Key: key, Owner: owner,
				BusinessId: "retry", Wait: durationpb.New(wait), Lease: durationpb.New(time.Minute)}))
			if got != nil {
				got <- err
			}
		}()
	}
	second := make(chan error, 1)
	waiter(beta, ledger, "ledger-writer-2", 10*time.Second, second)
	time.Sleep(600 * time.Millisecond)
	release(t, beta, ledger, first.GetToken())
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("the second ledger writer: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second ledger writer did not get the key within 10s")
	}
	// Waiters queued now, until the test ends.
	for _, w := range []struct{ key, owner string }{
		{"orders/10482/charge", "checkout-7f9c4-pq3zt"},
		{"orders/10482/charge", "checkout-7f9c4-t7ann"},
		{"orders/10482/charge", "refund-worker-1"},
		{"tickets/LH453/seat-14C", "booking-api-1"},
		{"tickets/LH453/seat-14C", "booking-api-4"},
	} {
		api := alpha
		if w.key == "tickets/LH453/seat-14C" {
			api = beta
		}
		waiter(api, w.key, w.owner, 2*time.Minute, nil)
	}
	// One that gave up.
	_, err := beta.Acquire(callCtx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: "tickets/LH453/seat-14D", Wait: durationpb.New(700 * time.Millisecond)}))
	if connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("a wait for a held seat: %v, want Aborted", err)
	}

	// A forced release, an expiry, a refused renewal, and a lease near its end.
	acquire(t, alpha, &distlockv1.AcquireRequest{Key: "cache/rebuild-catalog", Owner: "cache-warmer-0", BusinessId: "catalog v31", Lease: durationpb.New(time.Minute)})
	if _, err := admin.ForceRelease(callCtx(t), connect.NewRequest(&distlockv1.ForceReleaseRequest{
		Key: "cache/rebuild-catalog", Tenant: "alpha", Reason: "hung after deploy 4812"})); err != nil {
		t.Fatal(err)
	}
	exp := acquire(t, alpha, &distlockv1.AcquireRequest{Key: "exports/customers-csv", Owner: "export-job-17", BusinessId: "export 17", Lease: durationpb.New(time.Second)})
	acquire(t, beta, &distlockv1.AcquireRequest{Key: "payments/refund-2207", Owner: "refund-worker-3", BusinessId: "refund 2207", Lease: durationpb.New(10 * time.Second)})

	waitFor(t, ctx, 15*time.Second, "the expiry", `document.querySelector('#losses-body tr[data-key="alpha/exports/customers-csv"][data-kind="expired"]') !== null`)
	_, err = alpha.Renew(callCtx(t), connect.NewRequest(&distlockv1.RenewRequest{Key: "exports/customers-csv", Token: exp.GetToken()}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("the renewal of an expired lock: %v, want NotFound", err)
	}
	for _, c := range []struct{ what, cond string }{
		{"a dozen held locks", `document.querySelectorAll("#locks-body tr").length === 12`},
		{"three waiters on an order", `document.querySelector('#contended-body tr[data-key="alpha/orders/10482/charge"] td.hot')?.textContent === "3"`},
		{"the waits that ended", `document.querySelector('#contended-body tr[data-key="beta/ledger/account-5531"]') !== null && ` +
			`document.querySelector('#contended-body tr[data-key="beta/tickets/LH453/seat-14D"]') !== null`},
		{"the refused renewal", `document.querySelector('#losses-body tr[data-kind="renew refused"]') !== null`},
		{"the forced release", `document.querySelector('#losses-body tr[data-kind="force released"]') !== null`},
		{"a lease near its end", `document.querySelector('#locks-body tr.warn') !== null`},
	} {
		waitFor(t, ctx, 15*time.Second, c.what, c.cond)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("the screenshot is not a PNG (%d bytes)", len(png))
	}
	if os.Getenv(screenshotEnv) != "1" {
		t.Logf("a %d-byte screenshot; %s=1 writes it to docs/dashboard.png", len(png), screenshotEnv)
		return
	}
	path := filepath.Join("..", "..", "..", "..", "docs", "dashboard.png")
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		t.Fatal(errors.Join(errors.New("the repository's docs directory"), err))
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}
