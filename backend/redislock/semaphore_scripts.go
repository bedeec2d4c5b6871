package redislock

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// semScript names one of the scripts of semaphores and read-write locks,
// whose keys are laid out alike (semaphore.lua, rwlock.lua).
type semScript int

const (
	semAcquire semScript = iota
	semRenew
	semRelease
	semSetPermits
	semInspect
	semWithdraw
	rwAcquire
	rwWithdraw
	rwInspect
	rwDowngrade
	numSemScripts
)

var (
	//go:embed semaphore.lua
	semaphoreLua string
	//go:embed semaphore_acquire.lua
	semAcquireLua string
	//go:embed semaphore_renew.lua
	semRenewLua string
	//go:embed semaphore_release.lua
	semReleaseLua string
	//go:embed semaphore_setpermits.lua
	semSetPermitsLua string
	//go:embed semaphore_inspect.lua
	semInspectLua string
	//go:embed semaphore_withdraw.lua
	semWithdrawLua string
	//go:embed rwlock.lua
	rwlockLua string
	//go:embed rwlock_acquire.lua
	rwAcquireLua string
	//go:embed rwlock_withdraw.lua
	rwWithdrawLua string
	//go:embed rwlock_inspect.lua
	rwInspectLua string
	//go:embed rwlock_downgrade.lua
	rwDowngradeLua string
)

// semScriptSources holds each script's source: counter.lua, watchers.lua
// and semaphore.lua, then its own, and for a read-write lock's own scripts
// rwlock.lua before that; a read-write lock renews and releases with the
// semaphore's scripts, and both watch with watch.lua.
var semScriptSources = func() (s [numSemScripts]string) {
	for i, src := range [numSemScripts]string{
		semAcquire:    semAcquireLua,
		semRenew:      semRenewLua,
		semRelease:    semReleaseLua,
		semSetPermits: semSetPermitsLua,
		semInspect:    semInspectLua,
		semWithdraw:   semWithdrawLua,
		rwAcquire:     rwlockLua + rwAcquireLua,
		rwWithdraw:    rwlockLua + rwWithdrawLua,
		rwInspect:     rwlockLua + rwInspectLua,
		rwDowngrade:   rwlockLua + rwDowngradeLua,
	} {
		s[i] = counterLua + watchersLua + semaphoreLua + src
	}
	return s
}()

// semScripts holds each script compiled for both clients. The compiled
// scripts hold nothing but their source and its hash, so every backend
// shares them.
var semScripts = func() (s [numSemScripts]struct {
	goRedis *redis.Script
	rueidis *rueidis.Lua
}) {
	for i, src := range semScriptSources {
		s[i].goRedis, s[i].rueidis = redis.NewScript(src), rueidis.NewLuaScript(src)
	}
	return s
}()

// evalSem runs script s over a semaphore's or read-write lock's keys within the
// request timeout (see call) and returns its reply, an array of strings.
func (b *Backend) evalSem(ctx context.Context, s semScript, keys []string, args ...string) (r []string, err error) {
	err = b.call(ctx, func(ctx context.Context) error {
		r, err = b.st.(semStore).evalSem(ctx, s, keys, args)
		return err
	})
	return r, err
}

// semStore is implemented by both store adapters.
type semStore interface {
	evalSem(ctx context.Context, s semScript, keys, args []string) ([]string, error)
}

var (
	_ semStore = (*goRedis)(nil)
	_ semStore = (*rueidisStore)(nil)
)

func (g *goRedis) evalSem(ctx context.Context, s semScript, keys, args []string) ([]string, error) {
	return g.runScript(ctx, semScripts[s].goRedis, keys, args).StringSlice()
}

func (r *rueidisStore) evalSem(ctx context.Context, s semScript, keys, args []string) ([]string, error) {
	return semScripts[s].rueidis.Exec(ctx, r.c, keys, args).AsStrSlice()
}

// semReplyErr is the error of a script reply of an unexpected shape.
func semReplyErr(r []string) error { return fmt.Errorf("script returned %q", r) }
