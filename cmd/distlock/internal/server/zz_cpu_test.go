package server_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

func zzCPU(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b)[strings.LastIndex(string(b), ")")+2:])
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return time.Duration(u+s) * 10 * time.Millisecond
}

func TestZZCPU(t *testing.T) {
	etcd := testserver.Etcd(t)
	st := remoteStore{"etcd", testserver.EtcdEndpoint(etcd)}
	envs := strings.Split(os.Getenv("ZZ_ENVS"), ";")
	type svcC struct {
		env string
		svc *remoteService
		c   *distlock.Client
	}
	var svcs []svcC
	for _, e := range envs {
		var s *remoteService
		if e == "" {
			s = startRemoteService(t, st)
		} else {
			s = startRemoteServiceEnv(t, st, strings.Fields(e)...)
		}
		c := distlock.New(remoteBackendAt(t, s.addr, remoteClient))
		defer c.Close()
		svcs = append(svcs, svcC{e, s, c})
	}
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		for _, callers := range zzCallers {
			for _, sv := range svcs {
				n := 1000 * min(callers, 4)
				c0 := zzCPU(t, sv.svc.pid)
				t0 := time.Now()
				var wg sync.WaitGroup
				for g := 0; g < callers; g++ {
					wg.Go(func() {
						for i := 0; i < n/callers; i++ {
							l, err := sv.c.Lock(ctx, fmt.Sprintf("k/%d", g))
							if err != nil {
								t.Error(err)
								return
							}
							if err := l.Release(ctx); err != nil {
								t.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				wall := time.Since(t0)
				cpu := zzCPU(t, sv.svc.pid) - c0
				t.Logf("[%s] callers=%d: %.0f cycles/s, service CPU %.0f µs/RPC", sv.env, callers, float64(n)/wall.Seconds(), float64(cpu.Microseconds())/float64(2*n))
			}
		}
	}
}

var zzCallers = []int{16, 64}
