package etcdtool

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/storetool/doctor"
)

// checkEtcd inspects the cluster behind etcd://HOST:PORT[,HOST:PORT...]/PREFIX,
// read by etcdlock.ParseURL: each member's status, the member count, alarms
// and clocks.
func checkEtcd(ctx context.Context, u *url.URL, o doctor.Options, r *doctor.Report) error {
	cfg, err := etcdlock.ParseURL(u)
	if err != nil {
		return doctor.Refused(u, err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: o.Timeout, Context: ctx, Logger: zap.NewNop()})
	if err != nil {
		return doctor.Unreachable("etcd "+u.Host, err)
	}
	defer cli.Close()
	// Fail fast (not waiting for a connection) so that a refused dial is
	// named; serializable so that a member without quorum still answers.
	mctx, cancel := context.WithTimeout(ctx, o.Timeout)
	members, err := pb.NewClusterClient(cli.ActiveConnection()).MemberList(mctx, &pb.MemberListRequest{}, grpc.WaitForReady(false))
	cancel()
	if err != nil {
		return doctor.Unreachable("etcd "+u.Host+": member list", err)
	}
	healthy := etcdMembers(ctx, cli, members.Members, o, r)
	etcdQuorum(u.Host, len(members.Members), healthy, r)
	etcdAlarms(ctx, cli, u.Host, o, r)
	return nil
}

// etcdMembers asks each member for its status and clock, reports what it
// finds, and returns how many members answered.
func etcdMembers(ctx context.Context, cli *clientv3.Client, members []*pb.Member, o doctor.Options, r *doctor.Report) int {
	healthy := 0
	for _, m := range members {
		if len(m.ClientURLs) == 0 {
			r.Add(doctor.Finding{Severity: doctor.Warning, Check: "member-health", Node: m.Name,
				Seen:        "member has no client URL (not started yet, or added and never joined)",
				Consequence: "it counts towards the quorum without serving it",
				Fix:         "start the member, or remove it with etcdctl member remove"})
			continue
		}
		ep := m.ClientURLs[0]
		sctx, cancel := context.WithTimeout(ctx, o.Timeout)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			r.Add(doctor.Finding{Severity: doctor.Warning, Check: "member-health", Node: ep,
				Seen:        fmt.Sprintf("member %s does not answer: %v", m.Name, err),
				Consequence: "the cluster runs on the remaining members; see quorum for how many more it can lose",
				Fix:         "bring the member back (its logs say why it is down), or replace it with etcdctl member remove and member add"})
			continue
		}
		healthy++
		r.Add(etcdStatusFinding(m.Name, ep, st))
		r.Add(doctor.ClockFinding(ctx, ep, time.Second/2, func(ctx context.Context) (time.Time, error) { return httpDate(ctx, ep+"/version", o.Timeout) },
			"etcd counts a lease on its leader as a duration, so lock expiry does not depend on this offset; an unsynchronised clock still skews the times in logs and the lock holders' own records"))
	}
	return healthy
}

// etcdStatusFinding reports one member's status: its version, role and
// errors; a member without a leader is a doctor.Danger.
func etcdStatusFinding(name, ep string, st *clientv3.StatusResponse) doctor.Finding {
	role := "follower"
	if st.Leader == st.Header.MemberId {
		role = "leader"
	}
	f := doctor.Finding{Severity: doctor.Info, Check: "member-health", Node: ep,
		Seen: fmt.Sprintf("member %s: etcd %s, %s, raft term %d, db %d bytes", name, st.Version, role, st.RaftTerm, st.DbSize)}
	switch {
	case st.Leader == 0:
		f.Severity = doctor.Danger
		f.Seen = fmt.Sprintf("member %s sees no leader", name)
		f.Consequence = "without a leader no lock can be taken, renewed or released; holders lose their locks at the end of their validity"
		f.Fix = "restore the quorum: bring members back until a majority runs"
	case len(st.Errors) > 0:
		f.Severity = doctor.Warning
		f.Seen += "; errors: " + strings.Join(st.Errors, "; ")
		f.Consequence = "the member reports errors that may stop it serving requests"
		f.Fix = "read the member's logs for these errors"
	}
	return f
}

// etcdQuorum judges the member count and how many answered.
func etcdQuorum(node string, n, healthy int, r *doctor.Report) {
	quorum := n/2 + 1
	tolerates := n - quorum
	f := doctor.Finding{Severity: doctor.Info, Check: "quorum", Node: node,
		Seen: fmt.Sprintf("%d members, %d answering, quorum %d: tolerates %d failed members", n, healthy, quorum, tolerates)}
	switch {
	case healthy < quorum:
		f.Severity = doctor.Danger
		f.Consequence = "the quorum is lost: no lock can be taken, renewed or released; holders lose their locks at the end of their validity"
		f.Fix = "bring members back until a majority runs"
	case n%2 == 0:
		f.Severity = doctor.Warning
		f.Consequence = fmt.Sprintf("an even count tolerates no more failures than %d members would (%d), with one more machine that can fail; a partition into two halves stops both", n-1, tolerates)
		if n == 2 {
			f.Consequence = "either member failing stops locking: two members tolerate no failure, like one, with twice the chance of one"
		}
		f.Fix = "run an odd number of members (3 or 5): add one with etcdctl member add, or remove one"
	case n == 1:
		f.Consequence = "a single member keeps locks and fences across restarts, but while it is down no lock can be taken or renewed"
	case healthy < n:
		f.Severity = doctor.Warning
		f.Consequence = fmt.Sprintf("%d more failed members stop locking", healthy-quorum+1)
		f.Fix = "bring the failed members back"
	}
	r.Add(f)
}

// etcdAlarms reports the cluster's alarms: NOSPACE refuses every write,
// CORRUPT means a member's data diverged.
func etcdAlarms(ctx context.Context, cli *clientv3.Client, node string, o doctor.Options, r *doctor.Report) {
	actx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	alarms, err := cli.AlarmList(actx)
	if err != nil {
		r.Add(doctor.Unread("alarms", node, err, "run etcdctl alarm list"))
		return
	}
	for _, a := range alarms.Alarms {
		r.Add(doctor.Finding{Severity: doctor.Danger, Check: "alarm", Node: fmt.Sprintf("member %x", a.MemberID),
			Seen:        "alarm " + a.Alarm.String(),
			Consequence: "etcd refuses writes while the alarm is raised (NOSPACE: the database reached its quota): no lock can be taken, and held locks are lost when their leases cannot be renewed",
			Fix:         "NOSPACE: compact and defragment (etcdctl compact, etcdctl defrag) or raise --quota-backend-bytes, then etcdctl alarm disarm; CORRUPT: replace the member"})
	}
}

// httpDate returns the middle of the second that the Date header of a GET
// of target names: a server clock to within half a second.
func httpDate(ctx context.Context, target string, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return time.Time{}, err
	}
	req.Close = true // no idle connection left behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return time.Time{}, err
	}
	_ = resp.Body.Close()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return time.Time{}, fmt.Errorf("Date header: %w", err)
	}
	return date.Add(time.Second / 2), nil
}
