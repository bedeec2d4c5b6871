package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FakeClock is a wall clock that a test steps and speeds up or slows down
// under running store processes: the stores started with On(t) read the
// time of day through Debian's libfaketime, preloaded into them, which
// reads its setting from the clock's control file on every call
// (FAKETIME_TIMESTAMP_FILE with FAKETIME_NO_CACHE=1).
//
// Only the wall clock (CLOCK_REALTIME, gettimeofday, time) is faked, as an
// operator's `date -s`, an NTP step or a drifting host clock would move
// it; the monotonic clocks, which the kernel never steps, stay true
// (FAKETIME_DONT_FAKE_MONOTONIC=1). That is the clock each store keeps its
// expiries on: Redis's key expiry and TIME, MariaDB's UTC_TIMESTAMP(6),
// PostgreSQL's clock_timestamp(), Node.js's Date (dynalite). Go programs
// such as etcd read the clock through the vDSO without the C library and
// cannot be faked this way.
//
// libfaketime is required: a test that asks for a FakeClock fails, with
// the command that installs it, when it is missing, -short or not. So is a
// C compiler (the race detector needs one too): see preloadSource.
type FakeClock struct {
	file    string // the control file
	preload string // LD_PRELOAD
}

// NewFakeClock returns a clock that shows the true time until the test sets
// it. Its files are removed when the test ends.
func NewFakeClock(t testing.TB) *FakeClock {
	t.Helper()
	lib := findFaketime(t)
	dir := tempDir(t, "clock")
	c := &FakeClock{file: filepath.Join(dir, "faketimerc"), preload: buildPreload(t, dir) + ":" + lib}
	if err := c.write("+0"); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	return c
}

// On returns t for a server constructor (Redis, MariaDB, Dynalite,
// Postgres...) whose server should run under the clock:
//
//	clock := testserver.NewFakeClock(t)
//	s := testserver.Redis(clock.On(t))
//
// The server keeps the clock across Restart and Kill/Start.
func (c *FakeClock) On(t testing.TB) testing.TB { return clockTB{TB: t, clock: c} }

// clockTB carries a clock to newServer.
type clockTB struct {
	testing.TB
	clock *FakeClock
}

// Set sets the clock to the true time plus offset (negative: behind), in
// whole seconds, at the true rate. Setting it from a to b steps the
// processes' wall clock by b-a at once.
func (c *FakeClock) Set(offset time.Duration) error {
	if offset%time.Second != 0 {
		return fmt.Errorf("testserver: clock offset %v is not whole seconds", offset)
	}
	return c.write(fmt.Sprintf("%+d", int64(offset/time.Second)))
}

// SetRate makes the clock run rate times as fast as the true time (2: twice
// as fast, 0.5: half as fast) from now on, without a step: libfaketime's
// FAKETIME_XRESET starts the new rate from the time the clock shows. Use it
// on a clock that Set has not moved: a rate change keeps the clock where it
// is and drops a new offset given with it.
func (c *FakeClock) SetRate(rate float64) error {
	if rate <= 0 {
		return fmt.Errorf("testserver: clock rate %v is not positive", rate)
	}
	return c.write("+0 x" + strconv.FormatFloat(rate, 'f', -1, 64))
}

// write replaces the control file's setting at once: a process reading it
// meanwhile sees the old setting or the new one, never a part.
func (c *FakeClock) write(spec string) error {
	tmp := c.file + ".new"
	if err := os.WriteFile(tmp, []byte(spec+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.file)
}

// environ returns env (the process's own if nil) with what runs a store
// under the clock, and without any libfaketime setting it had.
func (c *FakeClock) environ(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env)+6)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if name == "LD_PRELOAD" || strings.HasPrefix(name, "FAKETIME") {
			continue
		}
		out = append(out, kv)
	}
	return append(out,
		"LD_PRELOAD="+c.preload,
		"FAKETIME_TIMESTAMP_FILE="+c.file,
		"FAKETIME_NO_CACHE=1",
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
		"FAKETIME_XRESET=1",
	)
}

// findFaketime returns the path of libfaketime's multithreaded library (the
// stores run threads), or fails the test saying how to install it.
func findFaketime(t testing.TB) string {
	t.Helper()
	for _, pattern := range []string{"/usr/lib/*/faketime/libfaketimeMT.so.1", "/usr/lib/faketime/libfaketimeMT.so.1", "/usr/local/lib/faketime/libfaketimeMT.so.1"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return m[0]
		}
	}
	t.Fatal("testserver: libfaketime not found (libfaketimeMT.so.1); clock faults need it: install it with `sudo apt-get install -y libfaketime` or `make deps`")
	return ""
}

// buildPreload compiles preloadSource into dir and returns the library's
// path.
func buildPreload(t testing.TB, dir string) string {
	t.Helper()
	cc := ""
	for _, name := range []string{os.Getenv("CC"), "cc", "gcc"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			cc = p
			break
		}
	}
	if cc == "" {
		t.Fatal("testserver: no C compiler (cc) to build the preload that runs libfaketime beside jemalloc; install one with `sudo apt-get install -y gcc` or `make deps`")
	}
	src, script, lib := filepath.Join(dir, "clockfix.c"), filepath.Join(dir, "clockfix.map"), filepath.Join(dir, "clockfix.so")
	if err := os.WriteFile(src, []byte(preloadSource), 0o644); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	if err := os.WriteFile(script, []byte(preloadVersions), 0o644); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, src, "-Wl,--version-script="+script).CombinedOutput(); err != nil {
		t.Fatalf("testserver: building the clock preload: %v\n%s", err, out)
	}
	return lib
}

// preloadSource is a library loaded before libfaketime into a store under
// a FakeClock. libfaketime 0.9.10 (Debian 12) sets itself up on the first
// call it intercepts and allocates memory while it does (failed symbol
// lookups, a named semaphore, reading the control file). jemalloc, which
// redis-server allocates with, calls clock_gettime and pthread_cond_init
// while it sets itself up under its own lock, on the first allocation of
// the process: libfaketime's allocation then waits for that lock for ever,
// and redis-server hangs before main (libfaketime issue #130, open since
// 0.9.7). Here those calls do not reach libfaketime, which sets itself up
// on the process's first read of the wall clock instead, once jemalloc is
// ready.
const preloadSource = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int faked(clockid_t id) {
	return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI;
}

typedef int (*gettime_fn)(clockid_t, struct timespec *);
static gettime_fn next_gettime;

/* The wall clock goes to libfaketime; every other clock, never faked
   (FAKETIME_DONT_FAKE_MONOTONIC), to the kernel. */
int clock_gettime(clockid_t id, struct timespec *ts) {
	if (!faked(id))
		return syscall(SYS_clock_gettime, id, ts);
	gettime_fn f = __atomic_load_n(&next_gettime, __ATOMIC_ACQUIRE);
	if (f == NULL) {
		f = (gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
		__atomic_store_n(&next_gettime, f, __ATOMIC_RELEASE);
	}
	return f(id, ts);
}

typedef int (*sleep_fn)(clockid_t, int, const struct timespec *, struct timespec *);
static sleep_fn next_sleep;

/* Sleeps on the unfaked clocks go to the kernel too: libfaketime 0.9.10
   refuses an absolute sleep on the monotonic clock with EINVAL when it
   does not fake that clock. */
int clock_nanosleep(clockid_t id, int flags, const struct timespec *req, struct timespec *rem) {
	if (!faked(id))
		return syscall(SYS_clock_nanosleep, id, flags, req, rem) == 0 ? 0 : errno;
	sleep_fn f = __atomic_load_n(&next_sleep, __ATOMIC_ACQUIRE);
	if (f == NULL) {
		f = (sleep_fn)dlsym(RTLD_NEXT, "clock_nanosleep");
		__atomic_store_n(&next_sleep, f, __ATOMIC_RELEASE);
	}
	return f(id, flags, req, rem);
}

typedef int (*cond_fn)(pthread_cond_t *, const pthread_condattr_t *);
static cond_fn next_cond_init;

/* A condition without attributes waits on the wall clock: glibc only
   zeroes it, and libfaketime has nothing to note for it. */
int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a) {
	if (a == NULL) {
		memset(c, 0, sizeof *c);
		return 0;
	}
	cond_fn f = __atomic_load_n(&next_cond_init, __ATOMIC_ACQUIRE);
	if (f == NULL) {
		f = (cond_fn)dlvsym(RTLD_NEXT, "pthread_cond_init", "GLIBC_2.3.2");
		__atomic_store_n(&next_cond_init, f, __ATOMIC_RELEASE);
	}
	return f(c, a);
}

typedef sem_t *(*sem_open_fn)(const char *, int, ...);
static sem_open_fn next_sem_open;

/* libfaketime's own semaphore is refused, so it keeps no shared memory: a
   store killed with SIGKILL would leave it in /dev/shm, and a later
   process of the same pid would find it and exit. */
sem_t *sem_open(const char *name, int oflag, ...) {
	mode_t mode = 0;
	unsigned int value = 0;
	if (oflag & O_CREAT) {
		va_list ap;
		va_start(ap, oflag);
		mode = va_arg(ap, mode_t);
		value = va_arg(ap, unsigned int);
		va_end(ap);
	}
	if (strncmp(name, "/faketime_", 10) == 0) {
		errno = ENOSYS;
		return SEM_FAILED;
	}
	sem_open_fn f = __atomic_load_n(&next_sem_open, __ATOMIC_ACQUIRE);
	if (f == NULL) {
		f = (sem_open_fn)dlvsym(RTLD_NEXT, "sem_open", "GLIBC_2.34");
		__atomic_store_n(&next_sem_open, f, __ATOMIC_RELEASE);
	}
	if (oflag & O_CREAT)
		return f(name, oflag, mode, value);
	return f(name, oflag);
}
`

// preloadVersions gives preloadSource's functions the symbol versions the
// store's libraries ask glibc for, so that they bind to them first.
const preloadVersions = `GLIBC_2.3.2 { global: pthread_cond_init; };
GLIBC_2.17 { global: clock_gettime; clock_nanosleep; };
GLIBC_2.34 { global: sem_open; local: *; };
`
