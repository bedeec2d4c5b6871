//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/testserver"
)

var (
	tableOut = flag.String("chaos.table", "", "write the table of results (Markdown) to this file too")
	keepDir  = flag.String("chaos.keep", "", "keep each scenario's histories (JSON lines) in a directory of its own under this one")
)

// The shape of every scenario: a short lease so that faults outlast it.
const (
	procs = 3
	lease = time.Second
	wait  = 2 * time.Second
)

// deployment is a store started for one scenario.
type deployment struct {
	// url is the URL a client process opens, given the address it dials
	// (its own fault proxy in front of addr); "" for a deployment of
	// several servers, which clients dial directly.
	url     func(addr string) string
	addr    string
	servers []*testserver.Server
	sent    *testserver.RedisSentinelSet
	cluster *redisShards
	clock   *testserver.FakeClock // the stores' wall clock, when a scenario moves it
}

type scenario struct {
	backend, fault string
	deploy         func(t *testing.T) *deployment
	inject         func(t *testing.T, r *run)
	failpoint      string        // a client-side fault instead of inject
	work           time.Duration // inside the critical section; the default is 20ms
	// exclusive: the backend promises, under this fault, that no two
	// holders are inside at once and that a holder knows of its loss before
	// the next holder writes. fenceSafe: fences never regress.
	exclusive, fenceSafe bool
	short                bool // part of the short form in make test
}

// run is one scenario under way.
type run struct {
	dep     *deployment
	mem     *memResource
	proxies []*faultproxy.Proxy // per client process, nil without
	pids    []int
	end     time.Time
}

type row struct {
	scenario
	r   Report
	err string
}

func TestChaos(t *testing.T) {
	pg := testserver.Postgres(t)
	db, err := sql.Open("pgx", testserver.PostgresDSN(pg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })

	var rows []row
	for i, sc := range scenarios() {
		if testing.Short() && !sc.short {
			continue
		}
		t.Run(sc.backend+"/"+sc.fault, func(t *testing.T) {
			rep := runScenario(t, db, testserver.PostgresDSN(pg), fmt.Sprintf("chaos_%d", i), sc)
			rows = append(rows, row{scenario: sc, r: rep})
			for _, f := range rep.Findings {
				t.Log(f)
			}
			switch {
			case rep.Ops == 0:
				t.Errorf("no acquisition at all")
			case rep.Unfinished > 0:
				t.Errorf("%d holders released without the resource recording their exit: the run is wrong, not the lock", rep.Unfinished)
			case rep.StaleAccepted > 0:
				t.Errorf("a fenced resource accepted %d stale writes", rep.StaleAccepted)
			case sc.exclusive && (rep.Overlaps > 0 || rep.LateLoss > 0):
				t.Errorf("exclusion promised under %s, but %d overlaps and %d late loss notices", sc.fault, rep.Overlaps, rep.LateLoss)
			case sc.fenceSafe && rep.Regressions > 0:
				t.Errorf("fences promised to increase under %s, but %d regressions", sc.fault, rep.Regressions)
			}
		})
	}
	table := formatTable(rows)
	fmt.Print(table)
	if *tableOut != "" {
		if err := os.WriteFile(*tableOut, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func formatTable(rows []row) string {
	var b strings.Builder
	b.WriteString("| backend | fault | ops | overlaps, holder not told | overlaps, holder told | stale writes rejected | stale writes accepted | fence regressions | late loss notices | promised |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		promise := []string{}
		if r.exclusive {
			promise = append(promise, "exclusion")
		}
		if r.fenceSafe {
			promise = append(promise, "fences")
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %s |\n", r.backend, r.fault, r.r.Ops,
			r.r.OverlapsUntold, r.r.Overlaps-r.r.OverlapsUntold-r.r.Unfinished, r.r.StaleRejected, r.r.StaleAccepted, r.r.Regressions, r.r.LateLoss, strings.Join(promise, ", "))
	}
	return b.String()
}

func runScenario(t *testing.T, db *sql.DB, dsn, table string, sc scenario) Report {
	dep := sc.deploy(t)
	dir := t.TempDir()
	if *keepDir != "" {
		dir = filepath.Join(*keepDir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runFor := 12 * time.Second
	if testing.Short() {
		runFor = 6 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE %[1]s (key text PRIMARY KEY, fence bigint NOT NULL, nonce text NOT NULL);
CREATE TABLE %[1]s_log (id bigserial PRIMARY KEY, key text NOT NULL, fence bigint NOT NULL, nonce text NOT NULL)`, table)); err != nil {
		t.Fatal(err)
	}

	resFile, err := os.Create(filepath.Join(dir, "resource.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer resFile.Close()
	resRec := NewRecorder(resFile, 0)
	r := &run{dep: dep, mem: startMemResource(t, resRec), end: time.Now().Add(runFor)}

	work := sc.work
	if work == 0 {
		work = 20 * time.Millisecond
	}
	var cmds []*exec.Cmd
	var exited []chan error
	histories := []string{resFile.Name()}
	defer func() { // never leave a client stopped
		for _, c := range cmds {
			_ = syscall.Kill(c.Process.Pid, syscall.SIGCONT)
		}
	}()
	for p := 1; p <= procs; p++ {
		u := dep.url("")
		var proxy *faultproxy.Proxy
		if dep.addr != "" {
			proxy = faultproxy.Start(t, dep.addr)
			u = dep.url(proxy.Addr())
		}
		j := job{Proc: p, URL: u, Keys: []string{"k0", "k1"}, Lease: lease, Wait: wait, Work: work, Writes: 2, Ops: 1000,
			Run: runFor, Mem: r.mem.addr(), PG: dsn, Table: table,
			History: filepath.Join(dir, fmt.Sprintf("p%d.jsonl", p))}
		if sc.failpoint != "" {
			j.Failpoint, j.Delay, j.Every = sc.failpoint, lease*3/2, 4
		}
		spec, _ := json.Marshal(&j)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		cmds, exited = append(cmds, cmd), append(exited, done)
		r.proxies, r.pids = append(r.proxies, proxy), append(r.pids, cmd.Process.Pid)
		histories = append(histories, j.History)
		t.Cleanup(func() {
			if t.Failed() && out.Len() > 0 {
				t.Logf("client %d:\n%s", j.Proc, tail(out.String()))
			}
		})
	}
	if sc.inject != nil {
		sc.inject(t, r)
	}
	for i, done := range exited {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("client %d: %v", i+1, err)
			}
		case <-time.After(time.Until(r.end) + 30*time.Second):
			_ = cmds[i].Process.Kill()
			<-done
			t.Errorf("client %d did not stop in time", i+1)
		}
	}

	h, err := ReadFiles(histories...)
	if err != nil {
		t.Fatal(err)
	}
	if err := orderPG(ctx, db, table, h); err != nil {
		t.Fatal(err)
	}
	return Check(h)
}

// orderPG gives the PostgreSQL resource's events its order of decision, from
// the log that every accepted write appended to.
func orderPG(ctx context.Context, db *sql.DB, table string, h []Event) error {
	rows, err := db.QueryContext(ctx, fmt.Sprintf("SELECT id, nonce FROM %s_log", table))
	if err != nil {
		return err
	}
	defer rows.Close()
	seq := map[string]int64{}
	for rows.Next() {
		var id int64
		var nonce string
		if err := rows.Scan(&id, &nonce); err != nil {
			return err
		}
		seq[nonce] = id
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i := range h {
		if h[i].Resource == "pg" && h[i].Kind != WriteRejected {
			h[i].Seq = seq[h[i].Nonce]
		}
	}
	return nil
}

func tail(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}

// hold lets a fault last d, or until the run ends.
func (r *run) hold(d time.Duration) {
	d = min(d, max(time.Until(r.end), 0))
	timer := time.NewTimer(d)
	defer timer.Stop()
	<-timer.C
}

// occupant waits, up to 5s, for a client inside the critical section and
// returns its index, or -1.
func (r *run) occupant() int {
	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if pid := r.mem.occupant(); pid != 0 {
			for i, p := range r.pids {
				if p == pid {
					return i
				}
			}
		}
		select {
		case <-deadline:
			return -1
		case <-tick.C:
		}
	}
}

// repeat runs fault up to n times while the run lasts, a lease apart.
// It begins once a client is inside the critical section.
func (r *run) repeat(n int, fault func()) {
	if r.occupant() < 0 {
		return
	}
	for range n {
		if time.Until(r.end) < 2*lease {
			return
		}
		fault()
		r.hold(lease)
	}
}

// pause stops a holder inside the critical section (SIGSTOP) for 2.5
// leases, as a GC pause or a frozen VM would.
func pause(_ *testing.T, r *run) {
	r.repeat(3, func() {
		i := r.occupant()
		if i < 0 {
			return
		}
		_ = syscall.Kill(r.pids[i], syscall.SIGSTOP)
		r.hold(lease * 5 / 2)
		_ = syscall.Kill(r.pids[i], syscall.SIGCONT)
	})
}

// blackhole partitions a holder from the store for d.
func blackhole(d time.Duration) func(*testing.T, *run) {
	return func(_ *testing.T, r *run) {
		r.repeat(2, func() {
			i := r.occupant()
			if i < 0 {
				return
			}
			r.proxies[i].Blackhole()
			r.hold(d)
			r.proxies[i].Restore()
		})
	}
}

// restart kills the store (every server of it) and starts it again.
func restart(t *testing.T, r *run) {
	r.repeat(2, func() {
		for _, s := range r.dep.servers {
			s.Kill()
		}
		r.hold(lease / 2)
		for _, s := range r.dep.servers {
			s.Start()
		}
	})
}

func failover(t *testing.T, r *run) {
	r.repeat(2, func() {
		if r.occupant() >= 0 {
			r.dep.sent.Failover(t)
		}
	})
}

// leaderKill kills the etcd leader and starts it again after two leases.
func leaderKill(t *testing.T, r *run) {
	r.repeat(2, func() {
		leader := etcdLeader(t, r.dep.servers)
		if leader == nil {
			return
		}
		leader.Kill()
		r.hold(2 * lease)
		leader.Start()
	})
}

func etcdLeader(t *testing.T, members []*testserver.Server) *testserver.Server {
	for _, m := range members {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, testserver.EtcdEndpoint(m)+"/v3/maintenance/status", strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			continue
		}
		var st struct {
			Header struct {
				MemberID string `json:"member_id"`
			} `json:"header"`
			Leader string `json:"leader"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		_ = resp.Body.Close()
		cancel()
		if err == nil && st.Leader != "" && st.Leader == st.Header.MemberID {
			return m
		}
	}
	t.Log("no etcd leader found")
	return nil
}

// terminate ends the PostgreSQL backends that hold advisory locks.
func terminate(t *testing.T, r *run) {
	db, err := sql.Open("pgx", testserver.PostgresDSN(r.dep.servers[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r.repeat(3, func() {
		if r.occupant() < 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted`); err != nil {
			t.Error(err)
		}
	})
}

// redlockLoss kills k of the nodes and starts them again (without
// persistence: they come back empty) after two leases.
func redlockLoss(k int) func(*testing.T, *run) {
	return func(_ *testing.T, r *run) {
		r.repeat(2, func() {
			for _, s := range r.dep.servers[:k] {
				s.Kill()
			}
			r.hold(2 * lease)
			for _, s := range r.dep.servers[:k] {
				s.Start()
			}
		})
	}
}
