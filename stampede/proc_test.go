package stampede_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
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

// runChild runs the job in childEnv, if any, and reports whether it did: the
// process then exits with code instead of running tests.
func runChild() (code int, child bool) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return 0, false
	}
	var job childJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		fmt.Fprintln(os.Stderr, "child job:", err)
		return 2, true
	}
	if err := job.run(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1, true
	}
	return 0, true
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
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for go: %w", err)
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
	return json.NewEncoder(os.Stdout).Encode(res)
}

// 64 concurrent misses over three replica processes run load once, and all
// 64 callers get its value.
func TestConcurrentMissesAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server and processes")
	}
	rds := testserver.Redis(t)
	const procs, callers = 3, 64
	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	var ps []proc
	for i := range procs {
		n := callers / procs
		if i < callers%procs {
			n++
		}
		job, _ := json.Marshal(childJob{Addr: rds.Addr(), Key: "procs", Goroutines: n, Callers: callers})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(job))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		ps = append(ps, proc{cmd, stdin, bufio.NewReader(stdout)})
	}
	lines := make(chan string, procs)
	errs := make(chan error, procs)
	readLine := func(p proc) {
		go func() {
			l, err := p.out.ReadString('\n')
			if err != nil {
				errs <- err
				return
			}
			lines <- l
		}()
	}
	next := func() string {
		select {
		case l := <-lines:
			return l
		case err := <-errs:
			t.Fatalf("replica: %v", err)
		case <-time.After(bound):
			t.Fatalf("no word from a replica within %v", bound)
		}
		return ""
	}
	for _, p := range ps {
		readLine(p)
	}
	for range procs {
		if l := next(); l != "ready\n" {
			t.Fatalf("replica said %q", l)
		}
	}
	for _, p := range ps {
		if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
		readLine(p)
	}
	values := map[string]int{}
	var loads uint64
	for range procs {
		var r childResult
		if err := json.Unmarshal([]byte(next()), &r); err != nil {
			t.Fatal(err)
		}
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
