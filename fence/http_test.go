package fence_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/distlock/distlock/fence"
)

// TestHTTP sends fences over a real loopback connection: the client
// transport puts them in headers, the middleware checks them.
func TestHTTP(t *testing.T) {
	var (
		g      fence.Guard
		writes atomic.Int64
	)
	srv := httptest.NewServer(fence.Middleware(&g, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := fence.FromContext(r.Context())
		writes.Add(1)
		fmt.Fprintf(w, "%v %s %d", ok, tok.Key, tok.Fence)
	})))
	defer srv.Close()
	client := &http.Client{Transport: fence.Transport(srv.Client().Transport)}
	defer client.CloseIdleConnections()

	do := func(ctx context.Context, header map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	with := func(f uint64) context.Context {
		return fence.NewContext(context.Background(), fence.Token{Key: "orders/17", Fence: f})
	}

	if code, body := do(with(5), nil); code != http.StatusOK || body != "true orders/17 5" {
		t.Fatalf("fence 5: %d %q", code, body)
	}
	if code, _ := do(with(5), nil); code != http.StatusOK {
		t.Fatalf("fence 5 again (same grant): %d", code)
	}
	if code, _ := do(with(4), nil); code != http.StatusConflict {
		t.Fatalf("stale fence 4: %d, want 409", code)
	}
	if code, body := do(context.Background(), nil); code != http.StatusOK || body != "false  0" {
		t.Fatalf("no fence: %d %q, want it passed unchecked", code, body)
	}
	if code, _ := do(context.Background(), map[string]string{fence.HeaderFence: "x", fence.HeaderKey: "orders/17"}); code != http.StatusBadRequest {
		t.Fatalf("malformed fence: %d, want 400", code)
	}
	if code, _ := do(context.Background(), map[string]string{fence.HeaderFence: "9"}); code != http.StatusBadRequest {
		t.Fatalf("fence without key: %d, want 400", code)
	}
	if writes.Load() != 3 {
		t.Fatalf("the handler ran %d times, want 3: rejected requests must not reach it", writes.Load())
	}
	if g.Last("orders/17") != 5 {
		t.Fatalf("guard at %d after rejected requests, want 5", g.Last("orders/17"))
	}
}
