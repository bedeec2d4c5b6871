//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

func single(s *testserver.Server, url func(addr string) string) *deployment {
	return &deployment{url: url, addr: s.Addr(), servers: []*testserver.Server{s}}
}

func redisURL(addr string) string { return "redis://" + addr + "/0" }

func deployRedis(args ...string) func(*testing.T) *deployment {
	return func(t *testing.T) *deployment { return single(testserver.Redis(t, args...), redisURL) }
}

// deploySentinel starts a Sentinel set (a primary and a replica); its
// clients open it with the URL parameters params ("" for none). With spare,
// a second replica follows the primary that the sentinels never promote
// (replica-priority 0): they point it at each new primary as part of the
// failover.
func deploySentinel(params string, spare bool) func(*testing.T) *deployment {
	return func(t *testing.T) *deployment {
		set := testserver.RedisSentinel(t)
		if spare {
			p := set.Primary()
			r := testserver.Redis(t, "--replicaof", testserver.Host, strconv.Itoa(p.Port), "--replica-priority", "0")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := until(ctx, func() error { return role(ctx, r.Addr(), "slave", "master_link_status:up") }); err != nil {
				t.Fatal(err)
			}
			// The sentinels learn of a replica from the primary's INFO, which
			// they read every 10s: one they do not know yet would be left
			// behind by a failover.
			for _, sn := range set.SentinelAddrs() {
				if err := until(ctx, func() error { return sentinelReplicas(ctx, sn, 2) }); err != nil {
					t.Fatal(err)
				}
			}
		}
		addrs := set.SentinelAddrs()
		u := "redis-sentinel://" + addrs[0] + "/" + testserver.SentinelMaster + "?addr=" + strings.Join(addrs[1:], "&addr=")
		if params != "" {
			u += "&" + params
		}
		return &deployment{url: func(string) string { return u }, sent: set}
	}
}

// sentinelReplicas checks that the sentinel at addr knows n replicas of
// the primary.
func sentinelReplicas(ctx context.Context, addr string, n int) error {
	reply, err := testserver.RedisCommand(ctx, addr, "SENTINEL", "MASTER", testserver.SentinelMaster)
	if err != nil {
		return err
	}
	if !strings.Contains(reply, "num-slaves\n"+strconv.Itoa(n)+"\n") {
		return fmt.Errorf("the sentinel at %s does not know %d replicas yet", addr, n)
	}
	return nil
}

// replicaAck makes every grant and renewal wait for one replica, at most
// a fifth of the lease.
const replicaAck = "replica_ack=1&replica_ack_timeout=200ms"

func deployRedlock(t *testing.T) *deployment {
	var servers []*testserver.Server
	var addrs []string
	for range 5 {
		s := testserver.Redis(t)
		servers = append(servers, s)
		addrs = append(addrs, s.Addr())
	}
	u := "redlock://" + strings.Join(addrs, ",")
	return &deployment{url: func(string) string { return u }, servers: servers}
}

// deployEtcd runs n etcd members. Its clients use the ordered key layout,
// and so linked queues, as serve's embedded etcd does: every client of the
// run is of this release.
func deployEtcd(n int) func(*testing.T) *deployment {
	return func(t *testing.T) *deployment {
		members := testserver.EtcdCluster(t, n)
		if n == 1 {
			return single(members[0], func(addr string) string { return "etcd://" + addr + "/chaos?key_layout=ordered" })
		}
		var addrs []string
		for _, m := range members {
			addrs = append(addrs, m.Addr())
		}
		u := "etcd://" + strings.Join(addrs, ",") + "/chaos?key_layout=ordered"
		return &deployment{url: func(string) string { return u }, servers: members}
	}
}

func deployZK(t *testing.T) *deployment {
	return single(testserver.ZooKeeper(t), func(addr string) string { return "zk://" + addr + "/chaos?session_timeout=2s" })
}

func deployPostgres(t *testing.T) *deployment {
	return single(testserver.Postgres(t), func(addr string) string {
		return "postgres://postgres@" + addr + "/postgres?sslmode=disable"
	})
}

// durableMariaDB is the option that makes MariaDB keep every commit across a
// kill, as a production server is set up; the test servers' default keeps
// only those of a second ago.
const durableMariaDB = "--innodb-flush-log-at-trx-commit=1"

func deployMariaDB(t *testing.T) *deployment {
	return single(testserver.MariaDB(t, durableMariaDB), func(addr string) string { return "mysql://root@" + addr + "/distlock" })
}

// scenarios is the suite: every backend under every fault that applies to
// it, with what the backend promises under that fault.
//
// A store that loses locks (a restart without persistence, a failover) can
// only let a second holder in while the first still works: those scenarios
// hold each grant longer (longWork per write).
func scenarios() []scenario {
	const (
		excl     = true
		fence    = true
		longWork = 300 * time.Millisecond
	)
	return []scenario{
		{backend: "redis", fault: "none", deploy: deployRedis(), exclusive: excl, fenceSafe: fence, short: true},
		{backend: "redis", fault: "pause", deploy: deployRedis(), inject: pause, fenceSafe: fence, short: true},
		{backend: "redis", fault: "pause before write", deploy: deployRedis(), failpoint: failpointWrite, fenceSafe: fence},
		{backend: "redis", fault: "blackhole", deploy: deployRedis(), inject: blackhole(lease * 5 / 2), exclusive: excl, fenceSafe: fence},
		{backend: "redis", fault: "acquire reply late", deploy: deployRedis(), failpoint: distlock.FailpointAcquireSent, exclusive: excl, fenceSafe: fence},
		{backend: "redis", fault: "renewal late", deploy: deployRedis(), failpoint: distlock.FailpointRenew, work: longWork, fenceSafe: fence},
		{backend: "redis", fault: "restart, no persistence", deploy: deployRedis(), inject: restart, work: longWork, fenceSafe: fence, short: true},
		{backend: "redis", fault: "restart, AOF always", deploy: deployRedis("--appendonly", "yes", "--appendfsync", "always"), inject: restart, exclusive: excl, fenceSafe: fence},
		{backend: "redis-sentinel", fault: "failover", deploy: deploySentinel("", false), inject: failover, work: longWork, fenceSafe: fence},
		{backend: "redis-sentinel", fault: "failover, replica_ack=1", deploy: deploySentinel(replicaAck, false), inject: failover, work: longWork, fenceSafe: fence},
		{backend: "redis-sentinel", fault: "failover, replica_ack=1, spare replica", deploy: deploySentinel(replicaAck, true), inject: failover, work: longWork, fenceSafe: fence},
		{backend: "redis-cluster", fault: "failover", deploy: deployCluster(""), inject: clusterFailover, work: longWork, fenceSafe: fence},
		{backend: "redis-cluster", fault: "failover, replica_ack=1", deploy: deployCluster(replicaAck), inject: clusterFailover, work: longWork, fenceSafe: fence},
		{backend: "redlock", fault: "none", deploy: deployRedlock, exclusive: excl, fenceSafe: fence},
		{backend: "redlock", fault: "pause", deploy: deployRedlock, inject: pause},
		{backend: "redlock", fault: "pause before write", deploy: deployRedlock, failpoint: failpointWrite},
		{backend: "redlock", fault: "minority lost", deploy: deployRedlock, inject: redlockLoss(2), exclusive: excl},
		{backend: "redlock", fault: "majority lost, restarted empty", deploy: deployRedlock, inject: redlockLoss(3), work: longWork},
		{backend: "etcd", fault: "none", deploy: deployEtcd(1), exclusive: excl, fenceSafe: fence},
		{backend: "etcd", fault: "pause", deploy: deployEtcd(1), inject: pause, fenceSafe: fence},
		{backend: "etcd", fault: "pause before write", deploy: deployEtcd(1), failpoint: failpointWrite, fenceSafe: fence},
		{backend: "etcd", fault: "blackhole", deploy: deployEtcd(1), inject: blackhole(lease * 5 / 2), exclusive: excl, fenceSafe: fence},
		{backend: "etcd", fault: "restart", deploy: deployEtcd(1), inject: restart, exclusive: excl, fenceSafe: fence},
		{backend: "etcd x3", fault: "leader killed", deploy: deployEtcd(3), inject: leaderKill, exclusive: excl, fenceSafe: fence},
		{backend: "zookeeper", fault: "none", deploy: deployZK, exclusive: excl, fenceSafe: fence},
		{backend: "zookeeper", fault: "pause", deploy: deployZK, inject: pause, fenceSafe: fence},
		{backend: "zookeeper", fault: "pause before write", deploy: deployZK, failpoint: failpointWrite, fenceSafe: fence},
		{backend: "zookeeper", fault: "session expired", deploy: deployZK, inject: blackhole(4 * lease), exclusive: excl, fenceSafe: fence},
		{backend: "zookeeper", fault: "restart", deploy: deployZK, inject: restart, exclusive: excl, fenceSafe: fence},
		{backend: "postgres", fault: "none", deploy: deployPostgres, exclusive: excl, fenceSafe: fence},
		{backend: "postgres", fault: "pause", deploy: deployPostgres, inject: pause, fenceSafe: fence},
		{backend: "postgres", fault: "pause before write", deploy: deployPostgres, failpoint: failpointWrite, fenceSafe: fence},
		{backend: "postgres", fault: "blackhole", deploy: deployPostgres, inject: blackhole(lease * 5 / 2), exclusive: excl, fenceSafe: fence},
		{backend: "postgres", fault: "backend terminated", deploy: deployPostgres, inject: terminate, fenceSafe: fence},
		{backend: "mysql", fault: "none", deploy: deployMariaDB, exclusive: excl, fenceSafe: fence},
		{backend: "mysql", fault: "pause", deploy: deployMariaDB, inject: pause, fenceSafe: fence},
		{backend: "mysql", fault: "pause before write", deploy: deployMariaDB, failpoint: failpointWrite, fenceSafe: fence},
		{backend: "mysql", fault: "restart", deploy: deployMariaDB, inject: restart, fenceSafe: fence},
		{backend: "sqllock (MariaDB)", fault: "none", deploy: deploySQLLock, exclusive: excl, fenceSafe: fence},
		{backend: "sqllock (MariaDB)", fault: "pause", deploy: deploySQLLock, inject: pause, fenceSafe: fence},
		{backend: "sqllock (MariaDB)", fault: "pause before write", deploy: deploySQLLock, failpoint: failpointWrite, fenceSafe: fence},
		{backend: "sqllock (MariaDB)", fault: "blackhole", deploy: deploySQLLock, inject: blackhole(lease * 5 / 2), exclusive: excl, fenceSafe: fence},
		{backend: "sqllock (MariaDB)", fault: "restart", deploy: deploySQLLock, inject: restart, exclusive: excl, fenceSafe: fence},
		{backend: "dynamodb", fault: "none", deploy: deployDynamo, exclusive: excl, fenceSafe: fence},
		{backend: "dynamodb", fault: "pause", deploy: deployDynamo, inject: pause, fenceSafe: fence},
		{backend: "dynamodb", fault: "pause before write", deploy: deployDynamo, failpoint: failpointWrite, fenceSafe: fence},
		{backend: "dynamodb", fault: "blackhole", deploy: deployDynamo, inject: blackhole(lease * 5 / 2), exclusive: excl, fenceSafe: fence},
		{backend: "nats", fault: "none", deploy: deployNATS, exclusive: excl, fenceSafe: fence},
		{backend: "nats", fault: "pause", deploy: deployNATS, inject: pause, fenceSafe: fence},
		{backend: "nats", fault: "pause before write", deploy: deployNATS, failpoint: failpointWrite, fenceSafe: fence},
		{backend: "nats", fault: "blackhole", deploy: deployNATS, inject: blackhole(lease * 5 / 2), exclusive: excl, fenceSafe: fence},
		{backend: "nats", fault: "restart", deploy: deployNATS, inject: restart, exclusive: excl, fenceSafe: fence, short: true},
		// The store's wall clock stepped or made fast or slow (clock_test.go).
		{backend: "redis", fault: "clock forward", deploy: clocked(redisOn), inject: clockStep(2), work: longWork, fenceSafe: fence, short: true},
		{backend: "redis", fault: "clock back", deploy: clocked(redisOn), inject: clockStep(-2), exclusive: excl, fenceSafe: fence},
		{backend: "redis", fault: "clock fast (x2)", deploy: clocked(redisOn), inject: clockRate(2), work: longWork, fenceSafe: fence},
		{backend: "redis", fault: "clock slow (x0.5)", deploy: clocked(redisOn), inject: clockRate(0.5), exclusive: excl, fenceSafe: fence},
		{backend: "redis", fault: "clock back, restart, no persistence", deploy: clocked(redisOn), inject: clockBackRestart, work: longWork},
		{backend: "redlock", fault: "clock forward, 2 of 5 nodes", deploy: clocked(redlockClocked(2)), inject: clockStep(2), work: longWork, exclusive: excl},
		{backend: "redlock", fault: "clock forward, 3 of 5 nodes", deploy: clocked(redlockClocked(3)), inject: clockStep(2), work: longWork},
		{backend: "sqllock (MariaDB)", fault: "clock forward", deploy: clocked(sqlLockClocked), inject: clockStep(2), work: longWork, fenceSafe: fence},
		{backend: "sqllock (MariaDB)", fault: "clock back", deploy: clocked(sqlLockClocked), inject: clockStep(-2), exclusive: excl, fenceSafe: fence},
		{backend: "sqllock (MariaDB)", fault: "clock fast (x2)", deploy: clocked(sqlLockClocked), inject: clockRate(2), work: longWork, fenceSafe: fence},
		{backend: "sqllock (MariaDB)", fault: "clock slow (x0.5)", deploy: clocked(sqlLockClocked), inject: clockRate(0.5), exclusive: excl, fenceSafe: fence},
		{backend: "dynamodb", fault: "clock forward", deploy: clocked(dynamoClocked), inject: clockStep(2), exclusive: excl, fenceSafe: fence},
		{backend: "dynamodb", fault: "clock back", deploy: clocked(dynamoClocked), inject: clockStep(-2), exclusive: excl, fenceSafe: fence},
		// etcd's membership changed (membership_test.go).
		{backend: "etcd x3", fault: "member added, leader removed", deploy: deployEtcd(3), inject: membership, exclusive: excl, fenceSafe: fence},
	}
}
