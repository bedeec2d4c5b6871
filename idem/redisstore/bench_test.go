package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/idem/idemtest"
	"github.com/distlock/distlock/idem/redisstore"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkRedis compares, in one run on one server, a replay of a recorded
// result with a plain GET of a key, and a first run (nothing recorded) with a
// lock and release of the same lock store.
func BenchmarkRedis(b *testing.B) {
	ctx := context.Background()
	addr := testserver.Redis(b).Addr()
	k, closeAll, err := newKeeper(ctx, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer closeAll()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	lb, err := redislock.New(rc)
	if err != nil {
		b.Fatal(err)
	}
	c := distlock.New(lb)
	defer c.Close()
	value := []byte("receipt-0123456789")
	fn := func(context.Context, uint64) ([]byte, error) { return value, nil }
	if err := rc.Set(ctx, "plain", value, 0).Err(); err != nil {
		b.Fatal(err)
	}
	if _, err := k.Do(ctx, "recorded", []byte("request"), fn); err != nil {
		b.Fatal(err)
	}
	b.Run("Get", func(b *testing.B) {
		for b.Loop() {
			if err := rc.Get(ctx, "plain").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Replay", func(b *testing.B) {
		for b.Loop() {
			if r, err := k.Do(ctx, "recorded", []byte("request"), fn); err != nil || !r.Replayed {
				b.Fatal(r, err)
			}
		}
	})
	b.Run("LockRelease", func(b *testing.B) {
		for b.Loop() {
			l, err := c.TryLock(ctx, "bench-lock", distlock.WithLease(idemtest.Lease), distlock.WithWatchdog(true))
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("FirstRun", func(b *testing.B) {
		prefix, i := "first/"+strconv.FormatInt(time.Now().UnixNano(), 10)+"/", 0
		for b.Loop() {
			i++
			if r, err := k.Do(ctx, prefix+strconv.Itoa(i), []byte("request"), fn); err != nil || r.Replayed {
				b.Fatal(r, err)
			}
		}
	})
}

// The scripts of BenchmarkRedisFirstRunSteps: a lock (the token under the
// lock's name, with a fence), its release by token, and the two steps of a
// first run whose record lives beside the lock, in the lock's slot.
var (
	stepLock = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end
return 0`)
	stepRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
	// The record if there is one, else the lock: the grant's own step reads it.
	stepClaim = redis.NewScript(`
local r = redis.call('GET', KEYS[3])
if r then return r end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end
return 0`)
	// The record unless a live one is there, then the release by token.
	stepRecordRelease = redis.NewScript(`
local stored = redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3])
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if stored then return 1 end
return 0`)
)

// BenchmarkRedisFirstRunSteps measures what the Redis commands of a first
// run cost, without any client code around them, on one connection to one
// server: a lock and release (two round trips, the floor); the five round
// trips Keeper.Do makes today (read, lock, read again, record, release);
// and the two a lock store that keeps the record beside the lock would
// make (read the record or take the lock in one script; record and
// release in one). It is the floor of that design, which Keeper does not
// implement: docs/idempotency.md says what it needs.
func BenchmarkRedisFirstRunSteps(b *testing.B) {
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: testserver.Redis(b).Addr(), PoolSize: 1})
	defer rc.Close()
	for _, s := range []*redis.Script{stepLock, stepRelease, stepClaim, stepRecordRelease, redisstore.PutScript} {
		if err := s.Load(ctx, rc).Err(); err != nil {
			b.Fatal(err)
		}
	}
	const lease, keep = "1000", "60000"
	value := "receipt-0123456789"
	names := func(i int) []string {
		tag := "{first/" + strconv.Itoa(i) + "}"
		return []string{tag, tag + ":fence", tag + ":record"}
	}
	run := func(b *testing.B, steps func(keys []string, token string)) {
		i := 0
		for b.Loop() {
			i++
			steps(names(i), strconv.Itoa(i))
		}
		// The next sub-benchmark starts on a server without these keys.
		if err := rc.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
	must := func(v any, err error) any {
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	b.Run("LockRelease", func(b *testing.B) {
		run(b, func(k []string, token string) {
			must(stepLock.EvalSha(ctx, rc, k[:2], token, lease).Result())
			must(stepRelease.EvalSha(ctx, rc, k[:1], token).Result())
		})
	})
	b.Run("FiveSteps", func(b *testing.B) {
		run(b, func(k []string, token string) {
			must(rc.HMGet(ctx, k[2], "h", "v", "x", "n").Result())
			must(stepLock.EvalSha(ctx, rc, k[:2], token, lease).Result())
			must(rc.HMGet(ctx, k[2], "h", "v", "x", "n").Result())
			must(redisstore.PutScript.EvalSha(ctx, rc, k[2:], "hash", value, "0", "1", keep).Result())
			must(stepRelease.EvalSha(ctx, rc, k[:1], token).Result())
		})
	})
	b.Run("TwoSteps", func(b *testing.B) {
		run(b, func(k []string, token string) {
			must(stepClaim.EvalSha(ctx, rc, k, token, lease).Result())
			must(stepRecordRelease.EvalSha(ctx, rc, k, token, value, keep).Result())
		})
	})
}
