package testserver

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// Shared returns the server that start made for the first test of this
// test binary to ask for name, starting it then: the tests of a package
// that never stop, pause, restart or reconfigure their server share one
// process instead of paying a start each (a JVM for ZooKeeper, initdb for
// PostgreSQL). Such tests must keep to keys of their own. A shared server
// lives until the test binary's tests end; the package's TestMain must
// call Main or WithShared, which stop it.
//
// A start that failed fails every test that asks for name after it (or
// skips it, when the first was skipped).
func Shared(t testing.TB, name string, start func(testing.TB) *Server) *Server {
	t.Helper()
	if !mainRuns.Load() {
		t.Fatalf("testserver: Shared(%q) needs the package's TestMain to call testserver.Main or WithShared", name)
	}
	sharedMu.Lock()
	e, ok := shared[name]
	if !ok {
		e = &sharedEntry{}
		shared[name] = e
	}
	sharedMu.Unlock()
	e.once.Do(func() {
		life := &binaryLife{TB: t}
		defer func() {
			if e.s == nil {
				e.skipped = t.Skipped() // -short without the binary
				e.err = fmt.Sprintf("testserver: the shared %s did not start in %s", name, t.Name())
			}
		}()
		e.s = start(life) // a failed start ends t here, through t's FailNow
		sharedMu.Lock()
		lives = append(lives, life)
		sharedMu.Unlock()
	})
	switch {
	case e.s == nil && e.skipped:
		t.Skip(e.err)
	case e.s == nil:
		t.Fatal(e.err)
	}
	return e.s
}

// Main runs the tests of m, then stops the servers Shared started and
// removes their directories, and exits with the tests' status. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { testserver.Main(m) }
func Main(m *testing.M) { os.Exit(WithShared(m).Run()) }

// WithShared returns m whose Run also stops, once the tests are done, the
// servers Shared started, for a TestMain that hands m on, as
// goleak.VerifyTestMain(testserver.WithShared(m)) does.
func WithShared(m *testing.M) interface{ Run() int } {
	mainRuns.Store(true)
	return sharedRun{m}
}

// sharedRun is a *testing.M whose Run stops the shared servers after it.
type sharedRun struct{ m *testing.M }

// Run runs the tests, then stops the shared servers.
func (r sharedRun) Run() int {
	code := r.m.Run()
	sharedMu.Lock()
	ls := lives
	lives = nil
	sharedMu.Unlock()
	for _, l := range ls {
		l.end()
	}
	return code
}

var (
	mainRuns atomic.Bool
	sharedMu sync.Mutex
	shared   = make(map[string]*sharedEntry)
	lives    []*binaryLife
)

// sharedEntry is one shared server, or why it is missing.
type sharedEntry struct {
	once    sync.Once
	s       *Server
	skipped bool
	err     string
}

// binaryLife is the testing.TB a shared server is started with: the first
// test that asked for it while it starts, and the test binary's life for
// what it registers to run at the end (stopping the process, removing its
// directory), which Main runs once every test is done.
type binaryLife struct {
	testing.TB

	mu       sync.Mutex
	cleanups []func()
}

// Cleanup registers f to run when the test binary's tests are done.
func (l *binaryLife) Cleanup(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cleanups = append(l.cleanups, f)
}

// Failed reports false: a shared server outlives the test that started it,
// so that test's failure says nothing of the server.
func (l *binaryLife) Failed() bool { return false }

// end runs the registered cleanups, last first, as testing does.
func (l *binaryLife) end() {
	l.mu.Lock()
	fs := l.cleanups
	l.cleanups = nil
	l.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
