package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
	"github.com/distlock/distlock/observe"
)

// lostChannel is the channel on which a forced release names the token it
// removed, under the default prefix.
const lostChannel = redislock.DefaultPrefix + "notify:lost"

// A holder learns that its lock was force-released at once, from the
// notice the forced release publishes, not at its next renewal (a third of
// its 30 s lease), with each client library. The reason says what became
// of the key: deleted when nobody waited, taken when the forced release
// passed it to a queued waiter.
func TestForcedReleaseToldAtOnce(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters[:2] {
		for _, queued := range []bool{false, true} {
			reason := observe.LossDeleted
			if queued {
				reason = observe.LossTaken
			}
			t.Run(a.name+"/"+reason, func(t *testing.T) {
				ctx := testContext(t)
				holder, operator := newClient(t, a.new(t, s.Addr())), newClient(t, a.new(t, s.Addr()))
				key := "told/" + strings.ReplaceAll(t.Name(), "/", "-")
				l, err := holder.Lock(ctx, key, distlock.WithLease(30*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				eventually(t, "the holder listens for lost notices", func() error {
					if n := channelSubscribers(t, s.Addr(), lostChannel); n < 1 {
						return fmt.Errorf("%d subscribers of %s", n, lostChannel)
					}
					return nil
				})
				waited := make(chan error, 1)
				if queued {
					waiter := newClient(t, a.new(t, s.Addr()))
					go func() {
						w, err := waiter.Lock(ctx, key, distlock.WithWait(10*time.Second))
						if err == nil {
							err = w.Release(ctx)
						}
						waited <- err
					}()
					eventually(t, "the waiter queues", func() error {
						if v := rawCommand(t, []string{s.Addr()}, "GET", lockName(key)); !strings.HasSuffix(v, "\n") {
							return fmt.Errorf("the key holds %q, not a token marked queued", v)
						}
						return nil
					})
				}
				start := time.Now()
				if _, err := operator.ForceRelease(ctx, key, "the holder is stuck"); err != nil {
					t.Fatal(err)
				}
				select {
				case <-l.Done():
					t.Logf("told %v after the forced release", time.Since(start).Round(time.Millisecond))
				case <-time.After(5 * time.Second):
					t.Fatal("the holder was not told within 5 s of the forced release")
				}
				if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) || !strings.Contains(err.Error(), "("+reason+")") {
					t.Fatalf("Err() = %v, want ErrLockLost (%s)", err, reason)
				}
				if err := l.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) && !errors.Is(err, distlock.ErrLockLost) {
					t.Fatalf("Release after the loss: %v, want ErrNotHeld or ErrLockLost", err)
				}
				if queued {
					if err := <-waited; err != nil {
						t.Fatalf("the waiter: %v", err)
					}
				}
			})
		}
	}
}

// channelSubscribers is PUBSUB NUMSUB's count for channel.
func channelSubscribers(t testing.TB, addr, channel string) int {
	t.Helper()
	_, count, _ := strings.Cut(rawCommand(t, []string{addr}, "PUBSUB", "NUMSUB", channel), "\n") // "channel\ncount"
	n, _ := strconv.Atoi(count)
	return n
}

// BenchmarkForcedReleaseNotice is locktest.LossNotice with each client
// library: a holder is told of a forced release by its notice.
func BenchmarkForcedReleaseNotice(b *testing.B) {
	s := testserver.Redis(b)
	for _, a := range adapters[:2] {
		b.Run(a.name, func(b *testing.B) {
			holder, operator := distlock.New(a.new(b, s.Addr())), distlock.New(a.new(b, s.Addr()))
			defer holder.Close()
			defer operator.Close()
			// The first grant subscribes the holder's backend to the notices.
			l, err := holder.Lock(context.Background(), "loss-notice/first")
			if err != nil {
				b.Fatal(err)
			}
			for channelSubscribers(b, s.Addr(), lostChannel) < 1 {
				time.Sleep(time.Millisecond)
			}
			if err := l.Release(context.Background()); err != nil {
				b.Fatal(err)
			}
			locktest.LossNotice(b, holder, operator, 0)
		})
	}
}
