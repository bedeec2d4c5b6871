package testserver

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// MariaDB starts a MariaDB server with a fresh data directory and a database
// named "distlock"; root connects over TCP without a password. Connect with
// MariaDBDSN. The log of commits is flushed once a second, so a kill loses the
// last second's commits, unless args, server options given after the
// defaults, say "--innodb-flush-log-at-trx-commit=1".
func MariaDB(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := lookBinary(t, "mariadb-server", "mariadbd", "/usr/sbin/mariadbd")
	install := lookBinary(t, "mariadb-server", "mariadb-install-db")
	client := lookBinary(t, "mariadb-client", "mariadb")
	s := &Server{Name: "mariadb", Port: FreePort(t), Dir: tempDir(t, "my")}
	data := filepath.Join(s.Dir, "data")
	// The bootstrap server's temporary tables go to the server's own
	// directory too: in the shared /tmp, installs running side by side
	// (several test packages) failed deleting them.
	if out, err := exec.Command(install, "--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
		"--tmpdir="+s.Dir).CombinedOutput(); err != nil {
		t.Fatalf("testserver: mariadb-install-db: %v\n%s", err, out)
	}
	s.command = func() *exec.Cmd {
		return exec.Command(bin, append([]string{"--no-defaults", "--datadir=" + data, "--socket=" + filepath.Join(s.Dir, "mysqld.sock"),
			"--pid-file=" + filepath.Join(s.Dir, "mysqld.pid"), "--port=" + strconv.Itoa(s.Port), "--bind-address=" + Host,
			"--user=root", "--skip-name-resolve", "--log-error=" + filepath.Join(s.Dir, "err.log"), "--tmpdir=" + s.Dir,
			"--innodb-buffer-pool-size=32M", "--innodb-flush-log-at-trx-commit=0", "--max-connections=300"}, args...)...)
	}
	s.ready = func(ctx context.Context) error {
		_, err := run(ctx, client, "--no-defaults", "-uroot", "-h", Host, "-P", strconv.Itoa(s.Port),
			"-e", "CREATE DATABASE IF NOT EXISTS distlock")
		return err
	}
	return newServer(t, s)
}

// MariaDBDSN returns a go-sql-driver/mysql DSN for the distlock database of s.
func MariaDBDSN(s *Server) string {
	return fmt.Sprintf("root@tcp(%s)/distlock?parseTime=true", s.Addr())
}
