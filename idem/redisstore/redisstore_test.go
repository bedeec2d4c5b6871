package redisstore_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/idem"
	"github.com/distlock/distlock/idem/idemtest"
	"github.com/distlock/distlock/idem/redisstore"
	"github.com/distlock/distlock/internal/testserver"
)

func TestMain(m *testing.M) {
	if code, child := idemtest.RunChild(newKeeper); child {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

// newKeeper returns a Keeper whose locks and records are both in the Redis at
// addr, with lease idemtest.Lease renewed while fn runs.
func newKeeper(ctx context.Context, addr string) (*idem.Keeper, func(), error) {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	b, err := redislock.New(rc)
	if err != nil {
		return nil, nil, errors.Join(err, rc.Close())
	}
	c := distlock.New(b)
	closeAll := func() { _ = c.Close(); _ = rc.Close() }
	s, err := redisstore.New(rc)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	k, err := idem.New(c, s, idem.WithLockOptions(distlock.WithLease(idemtest.Lease), distlock.WithWatchdog(true)))
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return k, closeAll, nil
}

func setup(t *testing.T) (addr string, k *idem.Keeper, rc *redis.Client) {
	t.Helper()
	addr = testserver.Redis(t).Addr()
	k, closeAll, err := newKeeper(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	rc = redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	return addr, k, rc
}

func TestSuite(t *testing.T) {
	_, k, rc := setup(t)
	s, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	idemtest.Run(t, k, s)
}

func TestProcessDuplicates(t *testing.T) {
	addr, _, _ := setup(t)
	idemtest.ProcessDuplicates(t, addr, "procdup")
}

// fencedSet sets KEYS[1] to ARGV[1] unless KEYS[2] holds a fence above
// ARGV[2]: the side effect guarded by the attempt's fence.
var fencedSet = redis.NewScript(`
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last > tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return 1`)

func TestKilledAttempt(t *testing.T) {
	addr, k, rc := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dead := idemtest.KillMidRun(t, addr, "killed")
	write := func(value string, fence uint64) int64 {
		t.Helper()
		n, err := fencedSet.Run(ctx, rc, []string{"balance", "balance:fence"}, value, strconv.FormatUint(fence, 10)).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	start := time.Now()
	r, err := k.Do(ctx, "killed", []byte("request"), func(ctx context.Context, fence uint64) ([]byte, error) {
		if write("retried", fence) != 1 {
			return nil, errors.New("fenced write refused")
		}
		return []byte("retried"), nil
	})
	if err != nil || r.Replayed || r.Fence <= dead {
		t.Fatalf("retry: %+v, %v; want a fresh run with a fence above the killed attempt's %d", r, err, dead)
	}
	if waited := time.Since(start); waited < idemtest.Lease/2 {
		t.Fatalf("retry ran after %v, before the killed attempt's lease %v could end", waited, idemtest.Lease)
	}
	if write("late", dead) != 0 {
		t.Fatal("the killed attempt's late write under its old fence was accepted")
	}
	if v, err := rc.Get(ctx, "balance").Result(); err != nil || v != "retried" {
		t.Fatalf("balance %q, %v; want retried", v, err)
	}
}

func TestOptions(t *testing.T) {
	if _, err := redisstore.New(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("nil client: %v", err)
	}
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rc.Close()
	if _, err := redisstore.New(rc, redisstore.WithRequestTimeout(0)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("zero timeout: %v", err)
	}
}

func TestOpenURL(t *testing.T) {
	idemtest.RunURL(t, "redis://"+testserver.Redis(t).Addr()+"/0")
}
