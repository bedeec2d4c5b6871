//go:build chaos

package chaos

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"
)

// memResource is the in-memory fenced resource, served to the client
// processes over loopback HTTP by the test process. A holder enters with its
// fence and nonce, works, and exits; the resource lets in a fence above the
// highest it let in for the key, or equal to it from the same acquisition,
// and records every decision, in order, as resource events.
type memResource struct {
	rec *Recorder
	srv *http.Server
	ln  net.Listener

	mu     sync.Mutex
	seq    int64
	top    map[string]topFence
	inside map[string]map[string]int // key -> nonce -> pid
	// left is the number of the last write each acquisition (nonce) left
	// after: an enter of that write or an earlier one, arriving after its
	// exit (given up on, and overtaken), is refused.
	left map[string]int
}

type topFence struct {
	fence uint64
	nonce string
}

func startMemResource(t *testing.T, rec *Recorder) *memResource {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &memResource{rec: rec, ln: ln, top: map[string]topFence{}, inside: map[string]map[string]int{}, left: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /enter", m.enter)
	mux.HandleFunc("POST /exit", m.exit)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.srv.Shutdown(ctx)
		<-served
	})
	return m
}

func (m *memResource) addr() string { return m.ln.Addr().String() }

func (m *memResource) enter(w http.ResponseWriter, r *http.Request) {
	key, nonce := r.FormValue("key"), r.FormValue("nonce")
	fc, err1 := strconv.ParseUint(r.FormValue("fence"), 10, 64)
	pid, err2 := strconv.Atoi(r.FormValue("pid"))
	write, err3 := strconv.Atoi(r.FormValue("write"))
	if err := errors.Join(err1, err2, err3); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if last, ok := m.left[nonce]; ok && write <= last {
		http.Error(w, "this write has left already", http.StatusGone)
		return
	}
	m.seq++
	e := Event{Seq: m.seq, Key: key, Nonce: nonce, Fence: fc, Resource: "mem"}
	top, seen := m.top[key]
	if seen && (fc < top.fence || fc == top.fence && nonce != top.nonce) {
		e.Kind = WriteRejected
		m.rec.Record(e)
		http.Error(w, "stale fence", http.StatusConflict)
		return
	}
	m.top[key] = topFence{fc, nonce}
	if m.inside[key] == nil {
		m.inside[key] = map[string]int{}
	}
	m.inside[key][nonce] = pid
	e.Kind = WriteAccepted
	m.rec.Record(e)
}

func (m *memResource) exit(w http.ResponseWriter, r *http.Request) {
	key, nonce := r.FormValue("key"), r.FormValue("nonce")
	write, err := strconv.Atoi(r.FormValue("write"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if last, ok := m.left[nonce]; !ok || write > last {
		m.left[nonce] = write
	}
	if _, ok := m.inside[key][nonce]; !ok {
		return
	}
	delete(m.inside[key], nonce)
	m.rec.Record(Event{Kind: WriteDone, Key: key, Nonce: nonce, Resource: "mem"})
}

// occupant returns the pid of a process inside the critical section, 0 if
// none.
func (m *memResource) occupant() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, in := range m.inside {
		for _, pid := range in {
			return pid
		}
	}
	return 0
}

// An enter overtaken by its own exit (a holder that gave up on the enter's
// answer, as a run's end or a client timeout makes it) is refused when it
// arrives, and leaves nobody inside; the next write of the same
// acquisition enters.
func TestMemResourceEnterAfterItsExit(t *testing.T) {
	m := startMemResource(t, NewRecorder(io.Discard, 0))
	post := func(path string, q url.Values) int {
		t.Helper()
		resp, err := http.Post("http://"+m.addr()+path+"?"+q.Encode(), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	enter := url.Values{"key": {"k"}, "fence": {"1"}, "nonce": {"n"}, "pid": {"7"}, "write": {"0"}}
	if code := post("/exit", url.Values{"key": {"k"}, "nonce": {"n"}, "write": {"0"}}); code != http.StatusOK {
		t.Fatalf("exit: %d", code)
	}
	if code := post("/enter", enter); code != http.StatusGone {
		t.Errorf("an enter after its exit: %d, want %d", code, http.StatusGone)
	}
	if pid := m.occupant(); pid != 0 {
		t.Errorf("process %d inside after an enter overtaken by its exit", pid)
	}
	enter.Set("write", "1")
	if code := post("/enter", enter); code != http.StatusOK || m.occupant() != 7 {
		t.Errorf("the next write's enter: %d, occupant %d; want 200 and 7", code, m.occupant())
	}
}
