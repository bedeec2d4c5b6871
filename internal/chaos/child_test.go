//go:build chaos

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/backend/dynamolock"
	_ "github.com/distlock/distlock/backend/etcdlock"
	_ "github.com/distlock/distlock/backend/mysqllock"
	_ "github.com/distlock/distlock/backend/natslock"
	_ "github.com/distlock/distlock/backend/pglock"
	_ "github.com/distlock/distlock/backend/redislock"
	_ "github.com/distlock/distlock/backend/redlock"
	_ "github.com/distlock/distlock/backend/sqllock"
	_ "github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/childproc"
	"github.com/distlock/distlock/occ"
)

// childEnv carries a client process's job (JSON).
const childEnv = "DISTLOCK_CHAOS_CHILD"

func init() { runChild = func() (int, bool) { return childproc.Main(childEnv, (*job).run) } }

// job is what one client process does: up to Ops acquisitions within Run,
// each followed by Writes entries into the in-memory resource (Work long
// each) and one fenced write to the PostgreSQL resource, then a release.
type job struct {
	Proc    int
	URL     string
	Keys    []string
	Lease   time.Duration
	Wait    time.Duration
	Work    time.Duration
	Writes  int
	Ops     int
	Run     time.Duration
	Mem     string // the in-memory resource's address
	PG      string // the PostgreSQL resource's DSN
	Table   string // its table; Table+"_log" logs every accepted write
	History string // where this process records its events
	// Failpoint, when set, blocks the client for Delay at that failpoint
	// (distlock.FailpointAcquireSent or FailpointRenew) in every Every-th
	// acquisition.
	Failpoint string
	Delay     time.Duration
	Every     int

	delayNext atomic.Bool // the current acquisition meets the failpoint
	frozen    sync.Mutex  // held through a stall at failpointWrite: renewals wait too
}

// failpointWrite is the scenario's own failpoint: after the holder checked
// that its lock is held, before its write reaches the resource (the
// Kleppmann case: a pause no check on the client can see).
const failpointWrite = "write"

// stall blocks for the job's delay if the current acquisition is to meet
// the failpoint.
func (j *job) stall() {
	if j.delayNext.CompareAndSwap(true, false) {
		j.frozen.Lock()
		time.Sleep(j.Delay) // the fault itself: a client stopped at this point
		j.frozen.Unlock()
	}
}

func (j *job) run() error {
	f, err := os.Create(j.History)
	if err != nil {
		return err
	}
	defer f.Close()
	rec := NewRecorder(f, j.Proc)
	ctx, cancel := context.WithTimeout(context.Background(), j.Run)
	defer cancel()

	client, err := open(ctx, j.URL)
	if err != nil {
		return err
	}
	defer client.Close()
	db, err := sql.Open("pgx", j.PG)
	if err != nil {
		return err
	}
	defer db.Close()
	hc := &http.Client{Timeout: 5 * time.Second}

	switch j.Failpoint {
	case "":
	case failpointWrite: // the whole process stops, its watchdog too
		distlock.SetFailpoint(distlock.FailpointRenew, func(string) {
			j.frozen.Lock()
			j.frozen.Unlock()
		})
	default:
		distlock.SetFailpoint(j.Failpoint, func(string) { j.stall() })
	}
	for i := 0; i < j.Ops && ctx.Err() == nil; i++ {
		key := j.Keys[rand.IntN(len(j.Keys))]
		nonce := fmt.Sprintf("p%d-%d", j.Proc, i)
		if j.Failpoint != "" && i%j.Every == j.Every-1 {
			j.delayNext.Store(true)
		}
		rec.Record(Event{Kind: AcquireSent, Key: key, Nonce: nonce})
		l, err := client.Lock(ctx, key, distlock.WithLease(j.Lease), distlock.WithWatchdog(true), distlock.WithWait(j.Wait))
		if err != nil {
			j.delayNext.Store(false)
			continue // not acquired, or the store is down: try again
		}
		rec.Record(Event{Kind: Granted, Key: key, Nonce: nonce, Fence: l.Fence()})
		j.hold(ctx, rec, hc, db, l, nonce)
	}
	return rec.Err()
}

// hold does the writes of one acquisition and releases it, recording the
// loss as soon as the lock's Done channel says so.
func (j *job) hold(ctx context.Context, rec *Recorder, hc *http.Client, db *sql.DB, l *distlock.Lock, nonce string) {
	key, fc := l.Key(), l.Fence()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		<-l.Done()
		if err := l.Err(); errors.Is(err, distlock.ErrLockLost) {
			rec.Record(Event{Kind: LossNoticed, Key: key, Nonce: nonce, Reason: err.Error()})
		}
	}()
	for write := range j.Writes {
		if l.Err() != nil || ctx.Err() != nil {
			break // a careful holder checks before every write
		}
		if j.Failpoint == failpointWrite {
			j.stall()
		}
		if !j.memEnter(ctx, hc, key, fc, nonce, write) {
			// Refused, or a reply that never came (the run ended while the
			// request was on its way): the resource may have let the holder
			// in, so it leaves, or the resource counts it inside for ever
			// and the next holder as an overlap.
			j.memExit(ctx, hc, key, nonce, write)
			break
		}
		time.Sleep(j.Work) // the work inside the critical section
		j.memExit(ctx, hc, key, nonce, write)
	}
	if l.Err() == nil && ctx.Err() == nil {
		j.pgWrite(ctx, rec, db, key, fc, nonce)
	}
	rec.Record(Event{Kind: ReleaseSent, Key: key, Nonce: nonce})
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = l.Release(rctx)
	cancel()
	rec.Record(Event{Kind: ReleaseDone, Key: key, Nonce: nonce})
	select {
	case <-watched:
	case <-time.After(5 * time.Second):
	}
}

// memEnter enters the resource for the acquisition's write number write.
func (j *job) memEnter(ctx context.Context, hc *http.Client, key string, fc uint64, nonce string, write int) bool {
	q := url.Values{"key": {key}, "fence": {strconv.FormatUint(fc, 10)}, "nonce": {nonce}, "pid": {strconv.Itoa(os.Getpid())},
		"write": {strconv.Itoa(write)}}
	return j.post(ctx, hc, "/enter", q)
}

// memExit leaves the resource after write number write; leaving when not
// inside changes nothing, and an enter of that write that arrives later
// (one given up on, overtaken by its exit) is refused. It tries until the
// resource answers, for up to 10 s: an exit lost to a loaded machine's
// client timeout would leave the holder inside for ever, and the next
// holder counted as an overlap.
func (j *job) memExit(ctx context.Context, hc *http.Client, key, nonce string, write int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	q := url.Values{"key": {key}, "nonce": {nonce}, "write": {strconv.Itoa(write)}}
	for !j.post(ctx, hc, "/exit", q) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

func (j *job) post(ctx context.Context, hc *http.Client, path string, q url.Values) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+j.Mem+path+"?"+q.Encode(), nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// pgWrite is the fenced write to PostgreSQL: it takes a fence above the
// row's, or equal to it from the same acquisition, and logs what it took.
func (j *job) pgWrite(ctx context.Context, rec *Recorder, db *sql.DB, key string, fc uint64, nonce string) {
	q := fmt.Sprintf(`WITH u AS (
	INSERT INTO %[1]s AS r (key, fence, nonce) VALUES ($1, $2, $3)
	ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, nonce = EXCLUDED.nonce
	WHERE r.fence < EXCLUDED.fence OR (r.fence = EXCLUDED.fence AND r.nonce = EXCLUDED.nonce)
	RETURNING r.key)
INSERT INTO %[1]s_log (key, fence, nonce) SELECT key, $2, $3 FROM u`, j.Table)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := fence.Write(wctx, occ.SQL(db), q, key, int64(fc), nonce)
	switch {
	case err == nil:
		rec.Record(Event{Kind: WriteAccepted, Key: key, Nonce: nonce, Fence: fc, Resource: "pg"})
		rec.Record(Event{Kind: WriteDone, Key: key, Nonce: nonce, Fence: fc, Resource: "pg"})
	case errors.Is(err, fence.ErrStale):
		rec.Record(Event{Kind: WriteRejected, Key: key, Nonce: nonce, Fence: fc, Resource: "pg"})
	}
}

// open opens url, retrying while the store is down, until ctx ends.
func open(ctx context.Context, url string) (*distlock.Client, error) {
	for {
		client, err := distlock.Open(ctx, url)
		if err == nil {
			return client, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
