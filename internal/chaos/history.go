// Package chaos is the safety suite of distlock under faults: several client
// processes compete for a few keys through one backend while the store, the
// links and the clients themselves are paused, cut, killed and failed over;
// every holder writes to a fenced resource, and everything that happens is
// recorded in a History that Check judges.
//
// The scenario runner lives in this package's tests (built with -tags chaos,
// run by make chaos); the history and the checker are here so that the
// checker's self-test runs in every build.
package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// Kind is what an Event records.
type Kind string

// The events of a history. A client records the acquire, grant, release and
// loss events; the resource records the write events, in the order it
// decided them (Seq).
const (
	AcquireSent   Kind = "acquire-sent"   // a client sent an acquire (Nonce names the attempt)
	Granted       Kind = "granted"        // the acquire was granted (Fence)
	WriteAccepted Kind = "write-accepted" // the resource let the holder in (Resource, Fence)
	WriteRejected Kind = "write-rejected" // the resource refused a stale fence
	WriteDone     Kind = "write-done"     // the holder left the resource's critical section
	ReleaseSent   Kind = "release-sent"   // the holder started its release
	ReleaseDone   Kind = "release-done"   // the release returned
	LossNoticed   Kind = "loss-noticed"   // the lock's Done channel closed before release
)

// Event is one line of a history.
type Event struct {
	// T is CLOCK_MONOTONIC in nanoseconds: comparable between processes on
	// one host, not across hosts.
	T        int64  `json:"t"`
	Seq      int64  `json:"seq,omitempty"` // the resource's decision order
	Proc     int    `json:"proc"`
	Kind     Kind   `json:"kind"`
	Key      string `json:"key"`
	Nonce    string `json:"nonce"` // one acquisition attempt, unique in a run
	Fence    uint64 `json:"fence,omitempty"`
	Resource string `json:"resource,omitempty"`
	// Reason is why a lock was lost (LossNoticed): the lock's error.
	Reason string `json:"reason,omitempty"`
}

// Now returns CLOCK_MONOTONIC in nanoseconds.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("chaos: clock_gettime: %v", err)) // cannot fail on Linux
	}
	return ts.Nano()
}

// Recorder appends events to a JSON-lines writer; it is safe for concurrent
// use.
type Recorder struct {
	mu   sync.Mutex
	proc int
	enc  *json.Encoder
	err  error
}

// NewRecorder records the events of process proc to w.
func NewRecorder(w io.Writer, proc int) *Recorder {
	return &Recorder{proc: proc, enc: json.NewEncoder(w)}
}

// Record stamps e with the time and the process and writes it.
func (r *Recorder) Record(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.T == 0 {
		e.T = Now()
	}
	e.Proc = r.proc
	if err := r.enc.Encode(e); err != nil && r.err == nil {
		r.err = err
	}
}

// Err returns the first write error.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// ReadFiles merges the JSON-lines histories of several processes, sorted by
// time (then by the resource's order).
func ReadFiles(paths ...string) ([]Event, error) {
	var all []Event
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("chaos: history: %w", err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var e Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				_ = f.Close()
				return nil, fmt.Errorf("chaos: history %s: %w", p, err)
			}
			all = append(all, e)
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("chaos: history %s: %w", p, err)
		}
	}
	Sort(all)
	return all, nil
}

// Sort orders events by time, then by the resource's order.
func Sort(h []Event) {
	sort.SliceStable(h, func(i, j int) bool {
		if h[i].T != h[j].T {
			return h[i].T < h[j].T
		}
		return h[i].Seq < h[j].Seq
	})
}
