package idemtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/idem"
)

// RunURL checks idem.OpenURL on rawURL, the URL of a live store whose
// scheme the package under test registered: two Stores it opens share the
// records, a record is kept once, a parameter its backend finds invalid
// (request_timeout=soon) opens nothing, and a scheme nobody registered is ErrNoURLStore.
func RunURL(t *testing.T, rawURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, closeA, err := idem.OpenURL(ctx, rawURL)
	if err != nil {
		t.Fatalf("OpenURL: %v", err)
	}
	defer closeA()
	b, closeB, err := idem.OpenURL(ctx, rawURL) // a second opener migrates nothing new
	if err != nil {
		t.Fatalf("second OpenURL: %v", err)
	}
	defer closeB()
	key := fmt.Sprintf("url-%d", time.Now().UnixNano())
	r := idem.Record{Value: []byte("v"), Fence: 7}
	if ok, err := a.Put(ctx, key, r, time.Minute); err != nil || !ok {
		t.Fatalf("Put: %v, %v", ok, err)
	}
	if ok, err := b.Put(ctx, key, idem.Record{Value: []byte("w"), Fence: 8}, time.Minute); err != nil || ok {
		t.Fatalf("a second Put through another Store: %v, %v; want false, nil", ok, err)
	}
	got, ok, err := b.Get(ctx, key)
	if err != nil || !ok || string(got.Value) != "v" || got.Fence != 7 {
		t.Fatalf("Get through another Store: %+v, %v, %v", got, ok, err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("request_timeout", "soon")
	u.RawQuery = q.Encode()
	if _, _, err := idem.OpenURL(ctx, u.String()); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("OpenURL with request_timeout=soon: %v, want ErrInvalidOption", err)
	}
	if _, _, err := idem.OpenURL(ctx, "nosuchstore://127.0.0.1:1"); !errors.Is(err, idem.ErrNoURLStore) {
		t.Errorf("OpenURL of an unregistered scheme: %v, want ErrNoURLStore", err)
	}
}
