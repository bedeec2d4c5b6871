package locktest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// LossNotice is the loss-notice benchmark: b.N times, holder takes a key
// of its own with a 30 s lease, holds it for hold (a backend that starts
// watching a hold only after a while is measured past that while), and
// operator force-releases it. It reports how long the holder took to learn,
// from just before the forced release is sent (so the figure includes that
// call's round trip, within which the store changes) to the lock's Done(),
// at p50, p99 and max. A holder told before the call returns (one whose
// forced release waits for the holder's session to exit) is timed at
// Done(), not at the call's return. A holder told at its next renewal, a third of the
// lease later, would report about 10 s; one not told within 15 s fails the
// benchmark.
func LossNotice(b *testing.B, holder, operator *distlock.Client, hold time.Duration) {
	LossNoticeOf(b, holder, hold, func(ctx context.Context, key string) error {
		_, err := operator.ForceRelease(ctx, key, "loss notice benchmark")
		return err
	})
}

// LossNoticeOf is LossNotice with another change of the held key: change
// does it to the store behind the holder's back (a DEL, another client's
// write, ...).
func LossNoticeOf(b *testing.B, holder *distlock.Client, hold time.Duration, change func(ctx context.Context, key string) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		key := fmt.Sprintf("loss-notice/%d/%d", time.Now().UnixNano(), i)
		l, err := holder.Lock(ctx, key, distlock.WithLease(30*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(hold)
		changed := make(chan error, 1)
		start := time.Now()
		go func() { changed <- change(ctx, key) }()
		select {
		case <-l.Done():
			took = append(took, time.Since(start))
		case <-time.After(15 * time.Second):
			b.Fatalf("the holder of %q was not told within 15 s of the change", key)
		}
		if err := <-changed; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(took)
	ms := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(ms(1), "max-ms")
	b.ReportMetric(0, "ns/op")
}
