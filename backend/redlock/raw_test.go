package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/redis/rueidis"

	"github.com/distlock/distlock/backend/redislock"
)

// rawRedlock sends redislock's own acquire and release scripts, as the
// nodes' backends send them, to every node in parallel, as Redlock does,
// and nothing else: the floor the benchmarks hold Redlock to.
type rawRedlock struct {
	clients          []rueidis.Client
	acquire, release *rueidis.Lua
}

// newRawRedlock reads the scripts from redislock's sources: the acquire
// script after counter.lua and take.lua; the release script after
// watchers.lua, waking the watchers on its fast path (WithWatchedReleases,
// as Redlock's nodes are built), which ends before its queue library.
func newRawRedlock(clients []rueidis.Client) (*rawRedlock, error) {
	acquire, err := redislockSource("counter.lua", "take.lua", "acquire.lua")
	if err != nil {
		return nil, err
	}
	release, err := redislockSource("watchers.lua", "release.lua")
	if err != nil {
		return nil, err
	}
	if !strings.Contains(release, "--[[wake]]") {
		return nil, errors.New("release.lua no longer says where it wakes the watchers: update the floor")
	}
	release = strings.Replace(release, "--[[wake]]", "wakeWatchers(KEYS[7], ARGV[1])", 1)
	return &rawRedlock{clients: clients, acquire: rueidis.NewLuaScript(acquire), release: rueidis.NewLuaScript(release)}, nil
}

// redislockSource reads the source of redislock's scripts, concatenated.
func redislockSource(names ...string) (string, error) {
	var src []byte
	for _, n := range names {
		s, err := os.ReadFile(filepath.Join("..", "redislock", n))
		if err != nil {
			return "", err
		}
		src = append(src, s...)
	}
	return string(src), nil
}

// lock sends the acquire script for token to every node and returns how
// many granted it, with the default lease.
func (r *rawRedlock) lock(ctx context.Context, key, token string) (granted int, err error) {
	name := redislock.DefaultPrefix + "{" + key + "}"
	keys, args := []string{name, name + ":fence"}, []string{token, "30000"}
	return r.onAll(func(c rueidis.Client) (bool, error) {
		fence, err := r.acquire.Exec(ctx, c, keys, args).AsInt64()
		return fence > 0, err
	})
}

// unlock sends the release script for token to every node.
func (r *rawRedlock) unlock(ctx context.Context, key, token string) error {
	name := redislock.DefaultPrefix + "{" + key + "}"
	keys := []string{name, name + ":fence", name + ":meta", name + ":q", name + ":qt", name + ":qm", name + ":watchers"}
	args := []string{redislock.DefaultPrefix + "notify:", token, "bench"}
	_, err := r.onAll(func(c rueidis.Client) (bool, error) { return true, r.release.Exec(ctx, c, keys, args).Error() })
	return err
}

// onAll runs one request per node, one in this goroutine and the others in
// their own, as Redlock does, and returns how many said yes.
func (r *rawRedlock) onAll(do func(rueidis.Client) (bool, error)) (int, error) {
	yes := make([]bool, len(r.clients))
	errs := make([]error, len(r.clients))
	var wg sync.WaitGroup
	for i := 1; i < len(r.clients); i++ {
		wg.Go(func() { yes[i], errs[i] = do(r.clients[i]) })
	}
	yes[0], errs[0] = do(r.clients[0])
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("raw redlock: %w", err)
	}
	n := 0
	for _, y := range yes {
		if y {
			n++
		}
	}
	return n, nil
}
