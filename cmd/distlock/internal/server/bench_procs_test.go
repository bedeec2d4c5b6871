package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
	"github.com/distlock/distlock/internal/childproc"
	"github.com/distlock/distlock/internal/testserver"
)

// procEnv carries a client process's job (JSON) when the test binary runs
// as one of BenchmarkRemoteProcesses's clients.
const procEnv = "DISTLOCK_TEST_PROC_CLIENT"

// procJob is what one client process of BenchmarkRemoteProcesses does:
// Lock+Release cycles on Key through one path for Round.
type procJob struct {
	Path  string // "direct", "remote" or "etcd-lock"
	Store string // remoteStore's name and address, for direct
	Addr  string
	URL   string // the service's, for remote
	Etcd  string // an etcd endpoint, for etcd-lock
	Key   string
	Round time.Duration
}

// procResult is a client process's count of cycles in its round.
type procResult struct{ Cycles int }

// run sets up the job's path, says it is ready, and makes cycles from the
// parent's go until its round ends.
func (job procJob) run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cycle func() error
	switch job.Path {
	case "direct", "remote":
		var c *distlock.Client
		if job.Path == "direct" {
			b, err := remoteStoreBackend(job.Store, job.Addr)
			if err != nil {
				return err
			}
			c = distlock.New(b)
		} else {
			b, err := remotelock.New(nil, job.URL, remotelock.WithToken(remoteClient))
			if err != nil {
				return err
			}
			c = distlock.New(b)
		}
		defer c.Close()
		cycle = func() error {
			l, err := c.Lock(ctx, job.Key, distlock.WithWait(5*time.Second))
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}
	case "etcd-lock":
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{job.Etcd}, DialTimeout: 5 * time.Second})
		if err != nil {
			return err
		}
		defer cli.Close()
		lease, err := cli.Grant(ctx, 60)
		if err != nil {
			return err
		}
		if _, err := cli.KeepAlive(ctx, lease.ID); err != nil {
			return err
		}
		locks := v3lockpb.NewLockClient(cli.ActiveConnection())
		cycle = func() error {
			l, err := locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte(job.Key), Lease: int64(lease.ID)})
			if err != nil {
				return err
			}
			_, err = locks.Unlock(ctx, &v3lockpb.UnlockRequest{Key: l.Key})
			return err
		}
	default:
		return fmt.Errorf("unknown path %q", job.Path)
	}
	if err := cycle(); err != nil { // connections, scripts, leases
		return err
	}
	childproc.Ready()
	if err := childproc.AwaitGo(); err != nil {
		return err
	}
	var res procResult
	for end := time.Now().Add(job.Round); time.Now().Before(end); res.Cycles++ {
		if err := cycle(); err != nil {
			return err
		}
	}
	return childproc.Report(res)
}

// BenchmarkRemoteProcesses measures Lock+Release as replicas of a service
// make them: 16 client processes (this test binary, run again), each with
// one caller on a key of its own and one client, through the service
// (remotelock: one caller per client, so nothing to batch), straight on the
// store, and on the embedded store through etcd's own lock service. Each
// round runs every path's 16 processes for 2 s, the paths in turn, three
// rounds each; it reports each path's Lock+Release a second and the
// service's over the others:
//
//	cd cmd/distlock && go test -run '^$' -bench BenchmarkRemoteProcesses -benchtime 1x ./internal/server
func BenchmarkRemoteProcesses(b *testing.B) {
	const (
		procs  = 16
		round  = 2 * time.Second
		rounds = 3
	)
	for _, st := range []remoteStore{{"redis", testserver.Redis(b).Addr()}, embeddedStore(b)} {
		b.Run(st.name, func(b *testing.B) {
			svc := startRemoteService(b, st)
			paths := []procJob{{Path: "direct", Store: st.name, Addr: st.addr}, {Path: "remote", URL: svc.url}}
			if st.name == "embedded" {
				paths = append(paths, procJob{Path: "etcd-lock", Etcd: embeddedEndpoint(st.addr)})
			}
			rate := make([]float64, len(paths))
			for r := range rounds * b.N {
				for i, p := range paths {
					jobs := make([]procJob, procs)
					for c := range jobs {
						jobs[c] = p
						jobs[c].Key, jobs[c].Round = fmt.Sprintf("procs/%s/%d/%d", p.Path, r, c), round
					}
					children := childproc.StartAll(b, procEnv, jobs, time.Minute)
					for _, c := range children {
						if err := c.Go(); err != nil {
							b.Fatal(err)
						}
					}
					for _, c := range children {
						var res procResult
						c.Result(b, &res)
						rate[i] += float64(res.Cycles) / round.Seconds() / float64(rounds*b.N)
					}
				}
			}
			for i, p := range paths {
				b.ReportMetric(rate[i], p.Path+"-ops/s")
				if p.Path != "remote" {
					b.ReportMetric(rate[1]/rate[i], "remote/"+p.Path)
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}
