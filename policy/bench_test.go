package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/policy"
)

// BenchmarkTryLockRelease measures client.TryLock followed by Release on
// memlock without a policy, with groups and limits, and with degradation
// (the policy also observes every store request).
func BenchmarkTryLockRelease(b *testing.B) {
	groups := []policy.Group{
		{Name: "payments", Prefixes: []string{"payment/", "refund/"}, Critical: true, MaxWait: 5 * time.Second, MaxHold: time.Minute},
		{Name: "reports", Prefixes: []string{"report/"}, MaxHold: time.Hour},
	}
	limits, err := policy.New(policy.Config{Groups: groups})
	if err != nil {
		b.Fatal(err)
	}
	groups[1].Degrade = policy.Degrade{EnterP99: 250 * time.Millisecond}
	degrade, err := policy.New(policy.Config{Groups: groups})
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		opts []distlock.ClientOption
	}{
		{"none", nil},
		{"groups", []distlock.ClientOption{distlock.WithPolicy(limits)}},
		{"groups-degrade", []distlock.ClientOption{distlock.WithPolicy(degrade), distlock.WithObserver(degrade)}},
	}
	ctx := context.Background()
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			client := distlock.New(memlock.New(), c.opts...)
			defer client.Close()
			b.ReportAllocs()
			for b.Loop() {
				l, err := client.TryLock(ctx, "report/daily")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
