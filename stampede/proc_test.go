package stampede_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/childproc"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/stampede"
	"github.com/distlock/distlock/stampede/redisstore"
)

// childEnv carries a replica's job (JSON) when the test binary runs as one
// of a test's replica processes.
const childEnv = "STAMPEDE_TEST_CHILD"

// childJob is what a replica process does: Goroutines callers Get Key at
// once, after the parent says "go" on stdin.
type childJob struct {
	Addr       string // Redis, for the locks and the entries
	Key        string
	Goroutines int
	Callers    int // in all processes: the load waits until all have started
}

// childResult is what a replica reports.
type childResult struct {
	Values []string
	Errors []string
	Stats  stampede.Stats
}

func (job childJob) run() error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	client, err := distlock.Open(ctx, "redis://"+job.Addr)
	if err != nil {
		return err
	}
	defer client.Close()
	rc := redis.NewClient(&redis.Options{Addr: job.Addr})
	defer rc.Close()
	store, err := redisstore.New(rc)
	if err != nil {
		return err
	}
	cache, err := stampede.New(client, store)
	if err != nil {
		return err
	}
	defer cache.Close()
	started, loads := job.Key+":started", job.Key+":loads"
	load := func(ctx context.Context) ([]byte, error) {
		n, err := rc.Incr(ctx, loads).Result()
		if err != nil {
			return nil, err
		}
		// Hold the load until every caller of every process has started.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if s, err := rc.Get(ctx, started).Int(); err != nil {
				return nil, err
			} else if s >= job.Callers {
				break
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return []byte(fmt.Sprintf("load %d by %d", n, os.Getpid())), nil
	}
	childproc.Ready()
	if err := childproc.AwaitGo(); err != nil {
		return err
	}
	var (
		mu  sync.Mutex
		res childResult
		wg  sync.WaitGroup
	)
	for range job.Goroutines {
		wg.Go(func() {
			var v []byte
			err := rc.Incr(ctx, started).Err()
			if err == nil {
				v, err = cache.Get(ctx, job.Key, load)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Errors = append(res.Errors, err.Error())
			} else {
				res.Values = append(res.Values, string(v))
			}
		})
	}
	wg.Wait()
	res.Stats = cache.Stats()
	return childproc.Report(res)
}

// 64 concurrent misses over three replica processes run load once, and all
// 64 callers get its value.
func TestConcurrentMissesAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server and processes")
	}
	rds := testserver.Redis(t)
	const procs, callers = 3, 64
	jobs := make([]childJob, procs)
	for i := range jobs {
		jobs[i] = childJob{Addr: rds.Addr(), Key: "procs", Goroutines: callers / procs, Callers: callers}
		if i < callers%procs {
			jobs[i].Goroutines++
		}
	}
	ps := childproc.StartAll(t, childEnv, jobs, bound)
	for _, p := range ps {
		if err := p.Go(); err != nil {
			t.Fatal(err)
		}
	}
	values := map[string]int{}
	var loads uint64
	for _, p := range ps {
		var r childResult
		p.Result(t, &r)
		for _, e := range r.Errors {
			t.Errorf("caller: %s", e)
		}
		for _, v := range r.Values {
			values[v]++
		}
		loads += r.Stats.Loads
	}
	n, err := testserver.RedisCommand(context.Background(), rds.Addr(), "GET", "procs:loads")
	if err != nil {
		t.Fatal(err)
	}
	if n != "1" || loads != 1 || len(values) != 1 {
		t.Errorf("loads counted in Redis %s, in stats %d; values served %v: want one load, one value for all", n, loads, values)
	}
	for v, k := range values {
		if k != callers {
			t.Errorf("%q served to %d callers; want %d", v, k, callers)
		}
	}
}
