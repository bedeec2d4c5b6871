package policy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/observe"
	"github.com/distlock/distlock/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func uniqueKey(t *testing.T, prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + strings.ReplaceAll(t.Name(), "/", "-") + "-" + hex.EncodeToString(b[:])
}

func loadPolicy(t *testing.T, opts ...policy.Option) *policy.Policy {
	t.Helper()
	cfg, err := policy.LoadFile("testdata/groups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// limits are the request fields a policy sets.
type limits struct {
	Group       string
	Critical    bool
	Lease, Wait time.Duration
	Watchdog    bool
	MaxHold     time.Duration
}

// recorder is an observer that keeps the request fields of every acquisition.
type recorder struct{ events chan observe.Event }

func (r recorder) AcquireStarted(ctx context.Context, e observe.Event) context.Context {
	r.events <- e
	return ctx
}
func (r recorder) Observe(context.Context, observe.Event) {}

func TestApply(t *testing.T) {
	p := loadPolicy(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		prefix string
		opts   []distlock.Option
		want   limits
		err    string // a refusal with ErrInvalidOption containing err
	}{
		{name: "defaults filled", prefix: "payment/",
			want: limits{Group: "payments", Critical: true, Lease: 10 * time.Second, Watchdog: true, Wait: 5 * time.Second, MaxHold: 2 * time.Minute}},
		{name: "explicit values under the limits kept", prefix: "payment/",
			opts: []distlock.Option{distlock.WithLease(time.Minute), distlock.WithWait(time.Second), distlock.WithMaxHold(time.Minute)},
			want: limits{Group: "payments", Critical: true, Lease: time.Minute, Wait: time.Second, MaxHold: time.Minute}},
		{name: "lease over max", prefix: "refund/", opts: []distlock.Option{distlock.WithLease(2 * time.Minute)},
			err: `lease 2m0s exceeds max_lease 1m0s of group "payments"`},
		{name: "wait over max", prefix: "payment/", opts: []distlock.Option{distlock.WithWait(6 * time.Second)},
			err: `wait 6s exceeds max_wait 5s of group "payments"`},
		{name: "max hold over max", prefix: "payment/", opts: []distlock.Option{distlock.WithMaxHold(3 * time.Minute)},
			err: `max hold 3m0s exceeds max_hold 2m0s of group "payments"`},
		{name: "longest prefix", prefix: "report/export/",
			want: limits{Group: "report-exports", Lease: distlock.DefaultLease, Watchdog: true, Wait: time.Second}},
		{name: "default group", prefix: "other/", opts: []distlock.Option{distlock.WithMaxHold(time.Hour)},
			want: limits{Group: "default", Lease: distlock.DefaultLease, Watchdog: true, Wait: 30 * time.Second, MaxHold: time.Hour}},
		{name: "default group limit", prefix: "other/", opts: []distlock.Option{distlock.WithLease(10 * time.Minute)},
			err: `lease 10m0s exceeds max_lease 5m0s of group "default"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := recorder{events: make(chan observe.Event, 2)}
			mem := memlock.New()
			client := distlock.New(mem, distlock.WithPolicy(p), distlock.WithObserver(rec))
			defer client.Close()
			key := uniqueKey(t, c.prefix)

			r := distlock.Request{Key: key, Wait: distlock.WaitUntilContextDone, Lease: distlock.DefaultLease, Watchdog: true}
			for _, o := range c.opts {
				o(&r)
			}
			err := p.Apply(ctx, &r)
			if c.err != "" {
				if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Apply: err = %v, want ErrInvalidOption with %q", err, c.err)
				}
				// Through a client: refused before the store, which stays untouched.
				if _, err := client.Lock(ctx, key, c.opts...); !errors.Is(err, distlock.ErrInvalidOption) {
					t.Fatalf("Lock: err = %v, want ErrInvalidOption", err)
				}
				if info, err := mem.Inspect(ctx, key); err != nil || info.Held {
					t.Fatalf("after a refusal the key is held (%v, %v)", info.Held, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			got := limits{Group: r.Group, Critical: r.Critical, Lease: r.Lease, Watchdog: r.Watchdog, Wait: r.Wait, MaxHold: r.MaxHold}
			if got != c.want {
				t.Fatalf("Apply: got %+v, want %+v", got, c.want)
			}
			l, err := client.TryLock(ctx, key, c.opts...)
			if err != nil {
				t.Fatalf("TryLock: %v", err)
			}
			defer l.Release(ctx)
			if e := <-rec.events; e.Group != c.want.Group || e.Critical != c.want.Critical {
				t.Fatalf("event group %q critical %v, want %q %v", e.Group, e.Critical, c.want.Group, c.want.Critical)
			}
		})
	}
}

func TestGroupMaxHold(t *testing.T) {
	p, err := policy.New(policy.Config{Groups: []policy.Group{{Name: "jobs", Prefixes: []string{"job/"}, MaxHold: 150 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	client := distlock.New(memlock.New(), distlock.WithPolicy(p))
	defer client.Close()
	ctx := context.Background()
	l, err := client.Lock(ctx, uniqueKey(t, "job/"), distlock.WithWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the group's max hold did not end the lock within 10s")
	}
	if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) || !strings.Contains(err.Error(), observe.LossMaxHold) {
		t.Fatalf("Err() = %v, want ErrLockLost (max_hold)", err)
	}
	if held := l.HeldFor(); held < 150*time.Millisecond {
		t.Fatalf("lost after %v, before the max hold", held)
	}
	_ = l.Release(ctx)
}
