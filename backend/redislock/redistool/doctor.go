package redistool

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/storetool/doctor"
)

// quietLog discards go-redis's own log lines (a failed dial is logged by
// the pool before it is returned): doctor reports every error itself.
type quietLog struct{}

// Printf discards the line.
func (quietLog) Printf(context.Context, string, ...any) {}

// The doctor's output is its report; go-redis must not write to stderr.
func init() { redis.SetLogger(quietLog{}) }

// redisTarget is what a redis URL names, as redislock.ParseURL reads it.
type redisTarget struct {
	kind   string   // "node", "cluster" or "sentinel"
	addrs  []string // the node, seed nodes or sentinels
	master string   // the Sentinel master name
	db     int
	base   redis.Options // credentials, TLS and timeouts for every connection
	// ackReplicas and ackTimeout are the URL's replica_ack and
	// replica_ack_timeout (redislock.WithReplicaAck); 0 replicas: none.
	ackReplicas int
	ackTimeout  time.Duration
}

// newTarget returns the target of cfg, read by redislock.ParseURL from a
// URL of scheme: a redis-cluster:// URL's addresses are seed nodes, a
// Sentinel master makes them sentinels. Every connection uses cfg's
// credentials and TLS, and o.Timeout.
func newTarget(scheme string, cfg redislock.Config, o doctor.Options) *redisTarget {
	c := cfg.Client
	t := &redisTarget{kind: "node", addrs: c.InitAddress, master: c.Sentinel.MasterSet, db: c.SelectDB}
	t.ackReplicas, t.ackTimeout = cfg.ReplicaAck()
	switch {
	case t.master != "":
		t.kind = "sentinel"
	case scheme == "redis-cluster":
		t.kind = "cluster"
	}
	// PoolSize is far above the few connections a check uses (they are
	// dialled on demand): go-redis starts a background re-dial loop, which
	// outlives Close by up to a second, once as many dials failed as the
	// pool has slots.
	t.base = redis.Options{Username: c.Username, Password: c.Password, TLSConfig: c.TLSConfig.Clone(),
		DialTimeout: o.Timeout, ReadTimeout: o.Timeout, WriteTimeout: o.Timeout,
		ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 64, DisableIdentity: true}
	return t
}

// client returns a client of one node with the target's credentials.
func (t *redisTarget) client(addr string, db int) *redis.Client {
	opt := t.base
	opt.Addr, opt.DB = addr, db
	return redis.NewClient(&opt)
}

// redisNode is one node to inspect.
type redisNode struct {
	addr    string
	replica bool // expected to be a replica (Cluster, Sentinel)
	member  bool // one of several independent servers (Redlock): the deployment, not the node, decides what its absence costs
}

// Check is the doctor check of a redislock URL (redis://, rediss://,
// redis-sentinel://, redis-cluster://): it finds the nodes of the
// deployment, reports its topology, and inspects each node's eviction
// policy, persistence, replication and clock.
func Check(ctx context.Context, u *url.URL, o doctor.Options, r *doctor.Report) error {
	cfg, err := redislock.ParseURL(u)
	if err != nil {
		return doctor.Refused(u, err)
	}
	t := newTarget(u.Scheme, cfg, o)
	var nodes []redisNode
	switch t.kind {
	case "sentinel":
		nodes, err = sentinelTopology(ctx, t, u, r)
	case "cluster":
		nodes, err = clusterTopology(ctx, t, r)
	default:
		nodes, err = nodeTopology(ctx, t, r)
	}
	if err != nil {
		return err
	}
	for _, n := range nodes {
		checkRedisNode(ctx, t, n, t.kind == "node", r)
	}
	return nil
}

// CheckNode inspects the one Redis server cfg names (its first address),
// with cfg's credentials, TLS and database, as a member of a deployment of
// independent servers, as Redlock's nodes are: its eviction policy,
// persistence, role and clock, as Check does, without following a Cluster
// or judging what the server's absence costs, which the deployment
// decides. A server that does not answer fails with an error matching
// doctor.ErrUnreachable.
func CheckNode(ctx context.Context, cfg redislock.Config, o doctor.Options, r *doctor.Report) error {
	t := newTarget("redis", cfg, o)
	c := t.client(t.addrs[0], t.db)
	err := c.Ping(ctx).Err()
	_ = c.Close()
	if err != nil {
		return doctor.Unreachable("redis "+t.addrs[0], err)
	}
	checkRedisNode(ctx, t, redisNode{addr: t.addrs[0], member: true}, true, r)
	return nil
}

// infoFields parses an INFO reply into its fields.
func infoFields(info string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// nodeTopology reaches the node of a redis:// URL; a node of a Cluster
// makes the whole Cluster the target, as redislock does.
func nodeTopology(ctx context.Context, t *redisTarget, r *doctor.Report) ([]redisNode, error) {
	c := t.client(t.addrs[0], t.db)
	defer c.Close()
	info, err := c.Info(ctx, "cluster").Result()
	if err != nil {
		return nil, doctor.Unreachable("redis "+t.addrs[0], err)
	}
	if infoFields(info)["cluster_enabled"] == "1" {
		return clusterTopology(ctx, t, r)
	}
	return []redisNode{{addr: t.addrs[0]}}, nil
}

// clusterTopology reads CLUSTER INFO and CLUSTER NODES from the first seed
// that answers, reports the Cluster's state, and returns its nodes.
func clusterTopology(ctx context.Context, t *redisTarget, r *doctor.Report) ([]redisNode, error) {
	var errs []error
	for _, seed := range t.addrs {
		c := t.client(seed, 0)
		info, err := c.ClusterInfo(ctx).Result()
		var nodes string
		if err == nil {
			nodes, err = c.ClusterNodes(ctx).Result()
		}
		_ = c.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", seed, err))
			continue
		}
		return clusterFindings(seed, infoFields(info), nodes, r), nil
	}
	return nil, doctor.Unreachable("redis cluster", errors.Join(errs...))
}

// clusterFindings reports the state and shape of a Cluster from a seed's
// CLUSTER INFO fields and CLUSTER NODES reply, and returns the nodes that
// are not marked failed.
func clusterFindings(seed string, info map[string]string, nodesReply string, r *doctor.Report) []redisNode {
	var nodes []redisNode
	masters, replicas := 0, 0
	var failed []string
	for _, line := range strings.Split(strings.TrimSpace(nodesReply), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := f[2]
		if strings.Contains(flags, "fail") || strings.Contains(flags, "noaddr") {
			failed = append(failed, addr+" ("+flags+")")
			continue
		}
		replica := strings.Contains(flags, "slave")
		if replica {
			replicas++
		} else {
			masters++
		}
		nodes = append(nodes, redisNode{addr: addr, replica: replica})
	}
	r.Add(doctor.Finding{Severity: doctor.Info, Check: "topology", Node: seed,
		Seen: fmt.Sprintf("Redis Cluster: %d masters, %d replicas, cluster_state %s", masters, replicas, info["cluster_state"])})
	if info["cluster_state"] != "ok" || len(failed) > 0 {
		r.Add(doctor.Finding{Severity: doctor.Danger, Check: "cluster-state", Node: seed,
			Seen:        fmt.Sprintf("cluster_state %s; nodes failing: %s", info["cluster_state"], orNone(failed)),
			Consequence: "keys in slots without a reachable master can be neither locked nor renewed: their holders lose them at the end of their validity, and no one can take them until the slots are served again",
			Fix:         "bring the failing nodes back or fail their slots over to replicas (CLUSTER FAILOVER on a replica), and check CLUSTER INFO until cluster_state is ok"})
	}
	return nodes
}

// orNone joins s, or says "none".
func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// sentinelTopology asks the first sentinel that answers for the master and
// its replicas, reports what the sentinels see, and returns the master and
// replicas as nodes.
func sentinelTopology(ctx context.Context, t *redisTarget, u *url.URL, r *doctor.Report) ([]redisNode, error) {
	var errs []error
	for _, addr := range t.addrs {
		opt := t.base
		opt.Addr = addr
		s := redis.NewSentinelClient(&opt)
		nodes, err := sentinelNodes(ctx, s, addr, t.master, r)
		_ = s.Close()
		if errors.Is(err, redis.Nil) || (err != nil && strings.Contains(err.Error(), "No such master")) {
			return nil, doctor.Invalid(u, "the sentinel at %s monitors no master named %q", addr, t.master)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		for i := range nodes {
			nodes[i].replica = i > 0
		}
		return nodes, nil
	}
	return nil, doctor.Unreachable("redis sentinels", errors.Join(errs...))
}

// sentinelNodes reads the master's state and replicas from one sentinel.
func sentinelNodes(ctx context.Context, s *redis.SentinelClient, addr, master string, r *doctor.Report) ([]redisNode, error) {
	m, err := s.Master(ctx, master).Result()
	if err != nil {
		return nil, err
	}
	replicas, err := s.Replicas(ctx, master).Result()
	if err != nil {
		return nil, err
	}
	nodes := []redisNode{{addr: net.JoinHostPort(m["ip"], m["port"])}}
	for _, rep := range replicas {
		if !strings.Contains(rep["flags"], "down") {
			nodes = append(nodes, redisNode{addr: net.JoinHostPort(rep["ip"], rep["port"])})
		}
	}
	others, _ := strconv.Atoi(m["num-other-sentinels"])
	r.Add(doctor.Finding{Severity: doctor.Info, Check: "topology", Node: addr,
		Seen: fmt.Sprintf("Redis Sentinel: master %q at %s (flags %s), %d replicas, %d sentinels, quorum %s",
			master, nodes[0].addr, m["flags"], len(replicas), others+1, m["quorum"])})
	if quorum, err := s.CkQuorum(ctx, master).Result(); err != nil {
		r.Add(doctor.Finding{Severity: doctor.Warning, Check: "sentinel-quorum", Node: addr,
			Seen:        fmt.Sprintf("SENTINEL CKQUORUM: %v", err),
			Consequence: "the sentinels cannot agree on a failover: if the master fails, locking stops until it is back",
			Fix:         "run at least three sentinels on separate machines, with a quorum of a majority of them"})
	} else if others+1 < 3 {
		r.Add(doctor.Finding{Severity: doctor.Warning, Check: "sentinel-quorum", Node: addr,
			Seen:        fmt.Sprintf("%d sentinels (%s)", others+1, quorum),
			Consequence: "fewer than three sentinels cannot survive the loss of one and still authorise a failover",
			Fix:         "run at least three sentinels on separate machines"})
	}
	return nodes, nil
}

// checkRedisNode inspects one node: eviction, persistence, replication and
// clock. standalone says the URL named this node itself, so a replica there
// is a mistake rather than part of the topology.
func checkRedisNode(ctx context.Context, t *redisTarget, n redisNode, standalone bool, r *doctor.Report) {
	c := t.client(n.addr, 0)
	defer c.Close()
	cfg, err := redisConfig(ctx, c)
	if err != nil {
		r.Add(doctor.Unread("config", n.addr, err, "read maxmemory, maxmemory-policy, appendonly, appendfsync, save and min-replicas-to-write from the server's redis.conf (managed services: their parameter group)"))
	} else {
		r.Add(evictionFinding(n.addr, cfg))
		r.Add(persistenceFinding(n.addr, cfg))
	}
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		r.Add(doctor.Unread("replication", n.addr, err, "run INFO replication on the node"))
	} else if cfg != nil {
		replicationFindings(n, standalone, infoFields(info), cfg, r)
		if t.ackReplicas > 0 && infoFields(info)["role"] == "master" && !n.member {
			r.Add(replicaAckFinding(n.addr, t.ackReplicas, t.ackTimeout, strings.Count(info, "state=online")))
		}
	}
	r.Add(doctor.ClockFinding(ctx, n.addr, time.Microsecond, func(ctx context.Context) (time.Time, error) { return c.Time(ctx).Result() },
		"the redislock fence is max(last fence + 1, the server's TIME in µs): after a restart without the counter or a failover, fences keep increasing only if the new server's clock is not behind the old one's by more than the restart took; an unsynchronised clock is the usual way that breaks. Lock expiry itself is measured by Redis as a duration and does not depend on the offset"))
}

// redisSettings are the settings the node checks read.
var redisSettings = []string{"maxmemory", "maxmemory-policy", "appendonly", "appendfsync", "save", "min-replicas-to-write"}

// redisConfig reads redisSettings with CONFIG GET, one at a time (Redis
// before 7.0 takes one pattern per call).
func redisConfig(ctx context.Context, c *redis.Client) (map[string]string, error) {
	cfg := map[string]string{}
	for _, name := range redisSettings {
		m, err := c.ConfigGet(ctx, name).Result()
		if err != nil {
			return nil, fmt.Errorf("CONFIG GET %s: %w", name, err)
		}
		v, ok := m[name]
		if !ok {
			return nil, fmt.Errorf("CONFIG GET %s: no such setting", name)
		}
		cfg[name] = v
	}
	return cfg, nil
}

// evictionFinding judges maxmemory-policy against maxmemory.
func evictionFinding(node string, cfg map[string]string) doctor.Finding {
	policy, limit := cfg["maxmemory-policy"], cfg["maxmemory"]
	f := doctor.Finding{Check: "maxmemory-policy", Node: node, Severity: doctor.Info,
		Seen: fmt.Sprintf("maxmemory-policy %s, maxmemory %s bytes", policy, limit)}
	evicts := strings.HasPrefix(policy, "volatile-") || strings.HasPrefix(policy, "allkeys-")
	if !evicts {
		return f
	}
	f.Fix = "CONFIG SET maxmemory-policy noeviction, and the same in redis.conf (or CONFIG REWRITE): a full Redis then refuses the acquire with an OOM error instead of dropping a held lock. If this Redis must stay a cache that evicts, give locks a Redis of their own"
	which := "keys with a TTL, and every lock key and fence counter has one"
	if strings.HasPrefix(policy, "allkeys-") {
		which = "any key, lock keys and fence counters included"
	}
	if limit == "0" {
		f.Severity = doctor.Warning
		f.Consequence = fmt.Sprintf("maxmemory 0 sets no limit, so %s evicts nothing today and Redis grows until the kernel's OOM killer ends it (a restart: see persistence). The day maxmemory is set, it evicts %s", policy, which)
		return f
	}
	f.Severity = doctor.Danger
	f.Consequence = fmt.Sprintf("when memory reaches maxmemory, %s evicts %s: a held lock vanishes and a second client acquires it while the first still believes it holds it (until its next renewal is refused or its lease ends); an evicted counter sends the next fence back to the server-clock floor", policy, which)
	return f
}

// persistenceFinding judges appendonly, appendfsync and save.
func persistenceFinding(node string, cfg map[string]string) doctor.Finding {
	f := doctor.Finding{Check: "persistence", Node: node, Severity: doctor.Danger,
		Fix: "CONFIG SET appendonly yes and CONFIG SET appendfsync always, and the same in redis.conf (or CONFIG REWRITE); always costs one fsync per write"}
	lost := "another client can take those keys at once while their holders still believe they hold them (until their next renewal is refused or their lease ends). " +
		"Fences stay increasing only through the redislock fence's floor at the server's clock (TIME in µs), which fails if the clock restarts behind its old value by more than the restart took"
	switch {
	case cfg["appendonly"] != "yes" && cfg["save"] == "":
		f.Seen = `appendonly no and save "": no persistence`
		f.Consequence = "a restart or crash of this node empties it: every held lock and every fence counter is gone, so " + lost
	case cfg["appendonly"] != "yes":
		f.Seen = fmt.Sprintf("appendonly no; RDB snapshots only (save %s)", cfg["save"])
		f.Consequence = "a restart or crash loads the last snapshot: locks granted and counters advanced since it are lost, so " + lost + "; locks released since it come back until their TTL ends"
	case cfg["appendfsync"] == "always":
		f.Severity, f.Fix = doctor.Info, ""
		f.Seen = "appendonly yes, appendfsync always"
	default:
		f.Severity = doctor.Warning
		window := "about the last second (two when the disk is slow)"
		if cfg["appendfsync"] == "no" {
			window = "the writes the kernel had not flushed yet (up to about 30 s on Linux)"
		}
		f.Seen = fmt.Sprintf("appendonly yes, appendfsync %s", cfg["appendfsync"])
		f.Consequence = "a crash of redis-server alone loses nothing, but a crash of the host (power loss, kernel panic) loses " + window +
			" of acknowledged writes: grants and renewals in that window are forgotten, so " + lost
	}
	return f
}

// replicationFindings judges the node's role and its replicas' safety net.
func replicationFindings(n redisNode, standalone bool, info, cfg map[string]string, r *doctor.Report) {
	role := info["role"]
	switch {
	case role == "slave" && standalone:
		r.Add(doctor.Finding{Severity: doctor.Warning, Check: "role", Node: n.addr,
			Seen:        "this node is a replica (role:slave) of " + net.JoinHostPort(info["master_host"], info["master_port"]),
			Consequence: "it refuses lock writes (READONLY), so every acquire fails; after a failover this address may stop being the primary",
			Fix:         "point the URL at the primary, or at the sentinels with redis-sentinel://host:port/master"})
	case role == "master" && info["connected_slaves"] != "0" && cfg["min-replicas-to-write"] == "0":
		r.Add(doctor.Finding{Severity: doctor.Warning, Check: "min-replicas-to-write", Node: n.addr,
			Seen:        fmt.Sprintf("%s replicas connected, min-replicas-to-write 0", info["connected_slaves"]),
			Consequence: "replication is asynchronous and nothing holds the primary back when its replicas lag: a failover can promote a replica that never received a grant, and a second client then gets a key its holder still holds (its fence is higher, so a fenced resource refuses the old holder)",
			Fix:         "CONFIG SET min-replicas-to-write 1 and min-replicas-max-lag 10 (and in redis.conf): the primary then refuses writes when no replica is in sync, which narrows the window but cannot close it"})
	case role == "master" && info["connected_slaves"] == "0" && !n.replica && !n.member:
		r.Add(doctor.Finding{Severity: doctor.Info, Check: "replicas", Node: n.addr,
			Seen: "no replicas: while this node is down no lock can be taken or renewed"})
	}
}

// replicaAckFinding judges a master's replicas online against the URL's
// replica_ack: grants and renewals wait for that many, and fail without
// them.
func replicaAckFinding(node string, want int, timeout time.Duration, online int) doctor.Finding {
	f := doctor.Finding{Check: "replica-ack", Node: node,
		Seen: fmt.Sprintf("replica_ack=%d, replica_ack_timeout=%v; %d replicas online", want, timeout, online)}
	switch {
	case online < want:
		f.Severity = doctor.Danger
		f.Consequence = fmt.Sprintf("every grant of a key on this node waits %v for acknowledgements that cannot come, then is released and refused, and every renewal fails: no lock can be taken here, and held ones are lost when their validity ends", timeout)
		f.Fix = fmt.Sprintf("bring the replicas back, or lower replica_ack to the replicas this node keeps online (at most %d)", online)
	case online == want:
		f.Severity = doctor.Warning
		f.Consequence = "locking stops whenever one replica is missing: a replica's restart, and every failover, after which the new primary has one replica fewer until the old primary rejoins as its replica (about 10s under Sentinel)"
		f.Fix = fmt.Sprintf("run %d replicas, one more than replica_ack", want+1)
	default:
		f.Severity = doctor.Info
	}
	return f
}
