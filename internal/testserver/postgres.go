package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
)

// Postgres starts a PostgreSQL server (initdb into a fresh directory, trust
// authentication, fsync off). As root it runs the server as the postgres
// user, since PostgreSQL refuses to run as root. Connect with DSN.
func Postgres(t testing.TB) *Server {
	t.Helper()
	bin := postgresBin(t)
	s := &Server{Name: "postgres", Port: FreePort(t), Dir: tempDir(t, "pg"), stopSig: syscall.SIGINT}
	data := filepath.Join(s.Dir, "data")
	asUser := func(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("testserver: running as root needs the postgres user (apt-get install -y postgresql): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(s.Dir, uid, gid); err != nil {
			t.Fatalf("testserver: %v", err)
		}
		asUser = func(name string, args ...string) *exec.Cmd {
			return exec.Command("setpriv", append([]string{"--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "--", name}, args...)...)
		}
	}
	if out, err := asUser(filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8").CombinedOutput(); err != nil {
		t.Fatalf("testserver: initdb: %v\n%s", err, out)
	}
	s.command = func() *exec.Cmd {
		return asUser(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(s.Port), "-k", s.Dir,
			"-c", "listen_addresses="+Host, "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "full_page_writes=off", "-c", "max_connections=200",
			// Shared memory segments in the data directory, removed with
			// it: a server killed in a test leaves none in /dev/shm.
			"-c", "dynamic_shared_memory_type=mmap")
	}
	s.ready = func(ctx context.Context) error {
		_, err := run(ctx, filepath.Join(bin, "pg_isready"), "-q", "-h", Host, "-p", strconv.Itoa(s.Port), "-U", "postgres")
		return err
	}
	return newServer(t, s)
}

// PostgresDSN returns a connection URL for the postgres database of s.
func PostgresDSN(s *Server) string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", s.Addr())
}

// postgresBin returns the newest PostgreSQL server directory installed.
func postgresBin(t testing.TB) string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) < versionOf(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i]
		}
	}
	return filepath.Dir(lookBinary(t, "postgresql", "postgres"))
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}
