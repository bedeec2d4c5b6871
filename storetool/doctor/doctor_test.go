package doctor

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run checks rawURL and fails the test on an error.
func run(t *testing.T, rawURL string, o Options) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := Check(ctx, rawURL, o)
	if err != nil {
		t.Fatalf("Check(%s): %v", rawURL, err)
	}
	return r
}

// findings returns the findings of check.
func findings(r *Report, check string) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

// want asserts that r has a finding of check with severity sev whose Seen
// contains seen, and that every finding of check has a severity no worse
// than sev; it returns the finding.
func want(t *testing.T, r *Report, check string, sev Severity, seen string) Finding {
	t.Helper()
	var found *Finding
	for _, f := range findings(r, check) {
		if f.Severity < sev {
			t.Errorf("%s: %s finding %q, want at most %s", check, f.Severity, f.Seen, sev)
		}
		if f.Severity == sev && strings.Contains(f.Seen, seen) && found == nil {
			found = &f
		}
	}
	if found == nil {
		t.Fatalf("no %s finding %s containing %q in:\n%s", sev, check, seen, dump(r))
	}
	if sev != Info && (found.Consequence == "" || found.Fix == "") {
		t.Errorf("%s finding %s has no consequence or fix: %+v", sev, check, *found)
	}
	return *found
}

// clean asserts that r has neither dangers nor warnings.
func clean(t *testing.T, r *Report) {
	t.Helper()
	if r.Count(Danger)+r.Count(Warning) > 0 {
		t.Fatalf("want no danger or warning, got:\n%s", dump(r))
	}
}

// dump lists the findings for a failure message.
func dump(r *Report) string {
	var b strings.Builder
	for _, f := range r.Findings {
		b.WriteString("  " + f.Severity.String() + " " + f.Check + " [" + f.Node + "] " + f.Seen + "\n")
	}
	return b.String()
}

// redisDo runs a command on a test Redis and fails the test on an error.
func redisDo(t *testing.T, addr string, args ...string) {
	t.Helper()
	if _, err := testserver.RedisCommand(context.Background(), addr, args...); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

func TestRedisEvictionPolicies(t *testing.T) {
	s := testserver.Redis(t, "--maxmemory", "10mb", "--maxmemory-policy", "volatile-lru")
	u := "redis://" + s.Addr()
	f := want(t, run(t, u, Options{}), "maxmemory-policy", Danger, "volatile-lru, maxmemory 10485760")
	if !strings.Contains(f.Consequence, "every lock key and fence counter has one") {
		t.Errorf("consequence does not say lock keys have a TTL: %s", f.Consequence)
	}
	for _, p := range []string{"volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru", "allkeys-lfu", "allkeys-random"} {
		redisDo(t, s.Addr(), "CONFIG", "SET", "maxmemory-policy", p)
		want(t, run(t, u, Options{}), "maxmemory-policy", Danger, p)
	}
	redisDo(t, s.Addr(), "CONFIG", "SET", "maxmemory-policy", "noeviction")
	want(t, run(t, u, Options{}), "maxmemory-policy", Info, "noeviction")

	redisDo(t, s.Addr(), "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	redisDo(t, s.Addr(), "CONFIG", "SET", "maxmemory", "0")
	f = want(t, run(t, u, Options{}), "maxmemory-policy", Warning, "allkeys-lru, maxmemory 0")
	if !strings.Contains(f.Consequence, "evicts nothing today") {
		t.Errorf("maxmemory 0: consequence does not say what happens: %s", f.Consequence)
	}
}

func TestRedisPersistence(t *testing.T) {
	s := testserver.Redis(t)
	u := "redis://" + s.Addr()
	f := want(t, run(t, u, Options{}), "persistence", Danger, "no persistence")
	if !strings.Contains(f.Consequence, "server's clock") {
		t.Errorf("consequence does not say what keeps fences increasing: %s", f.Consequence)
	}
	redisDo(t, s.Addr(), "CONFIG", "SET", "save", "3600 1")
	want(t, run(t, u, Options{}), "persistence", Danger, "RDB snapshots only (save 3600 1)")
	redisDo(t, s.Addr(), "CONFIG", "SET", "appendonly", "yes")
	want(t, run(t, u, Options{}), "persistence", Warning, "appendfsync everysec")
	redisDo(t, s.Addr(), "CONFIG", "SET", "appendfsync", "no")
	want(t, run(t, u, Options{}), "persistence", Warning, "appendfsync no")
	redisDo(t, s.Addr(), "CONFIG", "SET", "appendfsync", "always")
	want(t, run(t, u, Options{}), "persistence", Info, "appendfsync always")
}

func TestRedisClean(t *testing.T) {
	s := testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction", "--maxmemory", "64mb")
	r := run(t, "redis://"+s.Addr()+"/2?prefix=app:&dial_timeout=1s", Options{})
	clean(t, r)
	want(t, r, "clock", Info, "server clock")
	want(t, r, "replicas", Info, "no replicas")
}

func TestRedisSentinelReplicas(t *testing.T) {
	set := testserver.RedisSentinel(t)
	addrs := set.SentinelAddrs()
	u := "redis-sentinel://" + addrs[0] + "/" + testserver.SentinelMaster + "?addr=" + addrs[1]
	r := run(t, u, Options{})
	want(t, r, "topology", Info, "Redis Sentinel: master \"mymaster\" at "+set.Primary().Addr()+" (flags master), 1 replicas, 3 sentinels, quorum 2")
	want(t, r, "min-replicas-to-write", Warning, "1 replicas connected, min-replicas-to-write 0")
	if n := len(findings(r, "persistence")); n != 2 {
		t.Errorf("persistence checked on %d nodes, want the primary and the replica:\n%s", n, dump(r))
	}

	redisDo(t, set.Primary().Addr(), "CONFIG", "SET", "min-replicas-to-write", "1")
	if f := findings(run(t, u, Options{}), "min-replicas-to-write"); len(f) != 0 {
		t.Errorf("min-replicas-to-write 1 still reported: %+v", f)
	}
	want(t, run(t, "redis://"+set.Replica().Addr(), Options{}), "role", Warning, "this node is a replica")

	_, err := Check(context.Background(), "redis-sentinel://"+addrs[0]+"/nosuchmaster", Options{})
	if !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), "nosuchmaster") {
		t.Errorf("unknown master: %v, want ErrInvalidURL naming it", err)
	}
}

func TestRedisCluster(t *testing.T) {
	c := testserver.RedisCluster(t, 3)
	for _, u := range []string{"redis-cluster://" + c.Addrs()[0], "redis://" + c.Addrs()[1]} {
		r := run(t, u, Options{})
		want(t, r, "topology", Info, "Redis Cluster: 3 masters, 0 replicas, cluster_state ok")
		if n := len(findings(r, "maxmemory-policy")); n != 3 {
			t.Errorf("%s: %d nodes inspected, want 3:\n%s", u, n, dump(r))
		}
		if len(findings(r, "cluster-state")) != 0 {
			t.Errorf("%s: healthy cluster reported failing:\n%s", u, dump(r))
		}
	}
	c.Nodes[2].Kill()
	r := run(t, "redis-cluster://"+c.Addrs()[0], Options{Timeout: time.Second})
	deadline := time.Now().Add(20 * time.Second)
	for len(findings(r, "cluster-state")) == 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond) // the cluster marks a node failed after its node timeout
		r = run(t, "redis-cluster://"+c.Addrs()[0], Options{Timeout: time.Second})
	}
	want(t, r, "cluster-state", Danger, "nodes failing: "+c.Addrs()[2])
}

func TestEtcdSingle(t *testing.T) {
	s := testserver.Etcd(t)
	r := run(t, "etcd://"+s.Addr()+"/app", Options{})
	clean(t, r)
	want(t, r, "quorum", Info, "1 members, 1 answering, quorum 1: tolerates 0 failed members")
	want(t, r, "member-health", Info, "leader")
	want(t, r, "clock", Info, "server clock")
}

func TestEtcdEvenMembersAndLostQuorum(t *testing.T) {
	members := testserver.EtcdCluster(t, 2)
	u := "etcd://" + members[0].Addr() + "," + members[1].Addr()
	f := want(t, run(t, u, Options{}), "quorum", Warning, "2 members, 2 answering, quorum 2")
	if !strings.Contains(f.Consequence, "either member failing stops locking") {
		t.Errorf("consequence: %s", f.Consequence)
	}
	members[1].Kill()
	r := run(t, u, Options{Timeout: time.Second})
	want(t, r, "quorum", Danger, "2 members, 1 answering")
	stopped := false
	for _, f := range findings(r, "member-health") {
		stopped = stopped || f.Severity == Warning && strings.Contains(f.Seen, "member m1 does not answer")
	}
	if !stopped {
		t.Errorf("the stopped member is not reported:\n%s", dump(r))
	}
}

// pgExec runs statements on a test PostgreSQL as postgres.
func pgExec(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func TestPostgresTimeouts(t *testing.T) {
	s := testserver.Postgres(t)
	dsn := testserver.PostgresDSN(s)
	r := run(t, dsn+"&request_timeout=2s&key_ids=sha256", Options{})
	want(t, r, "fsync", Warning, "fsync off")
	want(t, r, "synchronous_commit", Warning, "synchronous_commit off")
	want(t, r, "idle_session_timeout", Info, "0 (off)")
	want(t, r, "pooler", Info, "no pooler seen")

	pgExec(t, dsn, "ALTER ROLE postgres SET idle_session_timeout = '3s'",
		"ALTER DATABASE postgres SET statement_timeout = '2s'",
		"ALTER ROLE postgres SET idle_in_transaction_session_timeout = '5s'",
		"ALTER ROLE postgres SET lock_timeout = '1s'")
	r = run(t, dsn, Options{})
	want(t, r, "idle_session_timeout", Danger, "idle_session_timeout 3s")
	want(t, r, "statement_timeout", Warning, "statement_timeout 2s")
	want(t, r, "lock_timeout", Warning, "lock_timeout 1s")
	want(t, r, "idle_in_transaction_session_timeout", Warning, "5s, shorter than the lease (30s)")
	if f := findings(run(t, dsn, Options{Lease: 4 * time.Second}), "idle_in_transaction_session_timeout"); len(f) != 0 {
		t.Errorf("a 5s timeout against a 4s lease is reported: %+v", f)
	}

	pgExec(t, dsn, "ALTER ROLE postgres SET idle_session_timeout = '1min'")
	want(t, run(t, dsn, Options{}), "idle_session_timeout", Info, "idle_session_timeout 1m0s, over twice")
}

// TestPostgresClean: no danger, and the one warning is the test server's
// fsync=off, which its command line sets beyond ALTER SYSTEM's reach.
func TestPostgresClean(t *testing.T) {
	s := testserver.Postgres(t)
	dsn := testserver.PostgresDSN(s)
	pgExec(t, dsn, "ALTER ROLE postgres SET synchronous_commit = on")
	r := run(t, dsn, Options{})
	if r.Count(Danger) != 0 || r.Count(Warning) != 1 || len(findings(r, "fsync")) != 1 {
		t.Fatalf("want only the fsync warning, got:\n%s", dump(r))
	}
	want(t, r, "clock", Info, "server clock")
	want(t, r, "pooler", Info, "no pooler seen")
}

func TestZooKeeperSessionTimeout(t *testing.T) {
	s := testserver.ZooKeeper(t) // bounds 1s to 10s
	u := "zk://" + s.Addr() + "/app"
	r := run(t, u, Options{})
	clean(t, r)
	want(t, r, "session-timeout", Info, "asked 10s, granted 10s; the server grants 1s to 10s")
	want(t, r, "mode", Info, "standalone")

	f := want(t, run(t, u+"?session_timeout=15s", Options{}), "session-timeout", Warning, "asked 15s, granted 10s")
	if !strings.Contains(f.Consequence, "margin") {
		t.Errorf("consequence: %s", f.Consequence)
	}
	want(t, run(t, u+"?session_timeout=30s", Options{}), "session-timeout", Danger, "asked 30s, granted 10s")
	want(t, run(t, u+"?session_timeout=500ms", Options{}), "session-timeout", Info, "asked 500ms, granted 1s")
}

// mysqlDB opens a handle on the server of a mysql:// URL, closed with the test.
func mysqlDB(t *testing.T, rawURL string) *sql.DB {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysqlConfig(u, Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestMariaDBDurability(t *testing.T) {
	s := testserver.MariaDB(t) // innodb_flush_log_at_trx_commit=0
	u := "mysql://root@" + s.Addr() + "/distlock"
	r := run(t, u, Options{Lease: time.Hour})
	want(t, r, "innodb_flush_log_at_trx_commit", Warning, "innodb_flush_log_at_trx_commit 0")
	want(t, r, "version", Info, "MariaDB")

	db := mysqlDB(t, u)
	if _, err := db.Exec("SET GLOBAL innodb_flush_log_at_trx_commit = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("SET GLOBAL wait_timeout = 20"); err != nil {
		t.Fatal(err)
	}
	r = run(t, u, Options{})
	clean(t, r)
	want(t, r, "wait_timeout", Info, "wait_timeout 20s, shorter than the lease (30s): mysqllock's keepalive")
	want(t, r, "clock", Info, "server clock")
	want(t, r, "session", Info, "no multiplexing proxy or session reset seen")
	want(t, r, "max_statement_time", Info, "max_statement_time 0s")
	table := "mysql+table://root@" + s.Addr() + "/distlock"
	want(t, run(t, table, Options{}), "wait_timeout", Info, "harmless to mysql+table://")
}

// TestMariaDBNamedLockPitfalls: a wait_timeout as short as mysqllock's
// keepalive and a server-wide statement time limit are reported for
// mysql://, whose URL may carry mysqllock's own parameters.
func TestMariaDBNamedLockPitfalls(t *testing.T) {
	s := testserver.MariaDB(t)
	u := "mysql://root@" + s.Addr() + "/distlock"
	db := mysqlDB(t, u)
	for _, q := range []string{"SET GLOBAL wait_timeout = 2", "SET GLOBAL max_statement_time = 1.5"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	r := run(t, u+"?request_timeout=2s&keepalive=500ms", Options{})
	want(t, r, "wait_timeout", Danger, "about as short as mysqllock's keepalive")
	want(t, r, "max_statement_time", Warning, "max_statement_time 1.5s")
}

func TestInvalidURLs(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			_ = c.Close()
		}
	}()
	a := l.Addr().String()
	for _, u := range []string{
		"%zz", "mem://", "foo://" + a, "redis-sentinel://" + a, "redis-sentinel://" + a + "/m/x", "redis://" + a + "/abc",
		"redis-cluster:///", "etcd:///x", "zk:///", "zk://" + a + "?session_timeout=soon", "mysql:///db",
		"postgres://" + a + "/db?connect_timeout=x",
		"dynamodb://", "dynamodb://tbl:8000", "dynamodb://tbl/x", "dynamodb://tbl?region=us-east-1&endpoint=" + a,
		"dynamodb://tbl?region=us-east-1&timeout=1s", "dynamodb://tbl?region=us-east-1&region=eu-west-1",
		"dynamodb://tbl?region=us-east-1&retention=soon", "dynamodb://ab?region=us-east-1",
	} {
		_, err := Check(context.Background(), u, Options{})
		if !errors.Is(err, ErrInvalidURL) {
			t.Errorf("Check(%q) = %v, want ErrInvalidURL", u, err)
		}
	}
	select {
	case <-accepted:
		t.Error("an invalid URL made a connection")
	default:
	}
}

func TestUnreachable(t *testing.T) {
	dynamoEnv(t)
	port := testserver.FreePort(t) // nothing listens there
	a := net.JoinHostPort(testserver.Host, strconv.Itoa(port))
	for _, u := range []string{"redis://" + a, "redis-cluster://" + a, "redis-sentinel://" + a + "/m", "etcd://" + a,
		"postgres://postgres@" + a + "/postgres", "zk://" + a, "mysql://root@" + a + "/db",
		"dynamodb://tbl?region=us-east-1&endpoint=http://" + a} {
		start := time.Now()
		_, err := Check(context.Background(), u, Options{Timeout: time.Second})
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "refused") {
			t.Errorf("Check(%q) = %v, want ErrUnreachable naming the refused connection", u, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Check(%q) took %v", u, d)
		}
	}
}

func TestCheckHonoursContext(t *testing.T) {
	s := testserver.Redis(t)
	s.Pause()
	defer s.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	// go-redis finishes a dial it started in the background within the
	// request timeout, so the timeout is kept short enough for the leak
	// check at the end, and long enough to tell it from the context.
	_, err := Check(ctx, "redis://"+s.Addr(), Options{Timeout: 3 * time.Second})
	if d := time.Since(start); err == nil || d > 2*time.Second {
		t.Fatalf("Check on a paused Redis: %v after %v, want an error within the context's 200ms", err, d)
	}
}

func TestClockReading(t *testing.T) {
	for _, c := range []struct {
		r    clockReading
		skew bool
	}{
		{clockReading{offset: 2 * time.Second, uncertainty: time.Millisecond}, true},
		{clockReading{offset: -2 * time.Second, uncertainty: time.Millisecond}, true},
		{clockReading{offset: 900 * time.Millisecond, uncertainty: 500 * time.Millisecond}, false},
		{clockReading{offset: 3 * time.Millisecond}, false},
	} {
		if got := c.r.skewed(); got != c.skew {
			t.Errorf("%v: skewed %v, want %v", c.r, got, c.skew)
		}
	}
	ahead := clockFinding(context.Background(), "n", 0, func(context.Context) (time.Time, error) { return time.Now().Add(time.Hour), nil }, "why")
	if ahead.Severity != Warning || !strings.Contains(ahead.Seen, "ahead") || ahead.Consequence != "why" {
		t.Errorf("a clock an hour ahead: %+v", ahead)
	}
}
