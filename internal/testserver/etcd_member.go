package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EtcdMember is a member of an etcd cluster as the cluster lists it.
type EtcdMember struct {
	ID         string   `json:"ID"` // decimal: JSON carries 64-bit integers as strings
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
}

// EtcdMembers lists the members of the cluster that the running member s
// belongs to.
func EtcdMembers(ctx context.Context, s *Server) ([]EtcdMember, error) {
	var reply struct {
		Members []EtcdMember `json:"members"`
	}
	if err := etcdCall(ctx, s, "/v3/cluster/member/list", struct{}{}, &reply); err != nil {
		return nil, err
	}
	return reply.Members, nil
}

// EtcdAddMember adds a member to the cluster of the running members
// (`etcdctl member add`, sent to the first that answers), starts it with
// the cluster's settings and waits until it reports healthy. It is stopped
// when the test ends. etcd refuses to change its membership until every
// member has been connected for 5s (--strict-reconfig-check): a cluster
// started a moment ago is asked again until it accepts, for up to a minute.
func EtcdAddMember(t testing.TB, members []*Server) *Server {
	t.Helper()
	bin := lookBinary(t, "etcd-server", "etcd")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	peer := fmt.Sprintf("http://%s:%d", Host, FreePort(t))
	name := "m" + peer[strings.LastIndex(peer, ":")+1:]
	var list []EtcdMember
	err := etcdReconfigure(ctx, members, nil, func(m *Server) error {
		var reply struct {
			Members []EtcdMember `json:"members"`
		}
		err := etcdCall(ctx, m, "/v3/cluster/member/add", map[string][]string{"peerURLs": {peer}}, &reply)
		list = reply.Members
		return err
	})
	if err != nil {
		t.Fatalf("testserver: etcd member add: %v", err)
	}
	var initial []string
	for _, m := range list {
		n := m.Name
		if len(m.PeerURLs) == 1 && m.PeerURLs[0] == peer {
			n = name // the new member has no name until it starts
		}
		for _, u := range m.PeerURLs {
			initial = append(initial, n+"="+u)
		}
	}
	s := &Server{Name: "etcd-" + name, Port: FreePort(t), Dir: memDir(t, "etcd")}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	client := EtcdEndpoint(s)
	s.command = func() *exec.Cmd {
		return exec.Command(bin, "--name", name, "--data-dir", filepath.Join(s.Dir, "data"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "existing",
			"--logger", "zap", "--log-level", "warn", "--enable-pprof",
			"--heartbeat-interval", "50", "--election-timeout", "500")
	}
	s.ready = func(ctx context.Context) error { return etcdHealthy(ctx, client) }
	return newServer(t, s)
}

// EtcdRemoveMember removes the running member gone from its cluster
// (`etcdctl member remove`, sent to another of members that answers) and
// stops it. A removed member stops by itself once it learns of its
// removal; Stop ends it if it has not. Like EtcdAddMember, it asks again
// for up to 30s while etcd refuses for want of connected members.
func EtcdRemoveMember(t testing.TB, members []*Server, gone *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := etcdMemberID(ctx, gone)
	if err != nil {
		t.Fatalf("testserver: etcd member id of %s: %v", gone.Name, err)
	}
	err = etcdReconfigure(ctx, members, gone, func(m *Server) error {
		return etcdCall(ctx, m, "/v3/cluster/member/remove", map[string]string{"ID": id}, nil)
	})
	if err != nil {
		t.Fatalf("testserver: etcd member remove %s: %v", gone.Name, err)
	}
	gone.Stop()
}

// etcdReconfigure sends a membership change with send to each of members
// but skip in turn until one takes it, again every 200ms while etcd
// answers that the cluster is not ready for it, until ctx ends.
func etcdReconfigure(ctx context.Context, members []*Server, skip *Server, send func(*Server) error) error {
	for {
		err := errors.New("no member to ask")
		for _, m := range members {
			if m == skip {
				continue
			}
			if err = send(m); err == nil {
				return nil
			}
		}
		if !strings.Contains(err.Error(), "unhealthy cluster") {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// etcdMemberID returns the ID of the member s, from its status.
func etcdMemberID(ctx context.Context, s *Server) (string, error) {
	var st struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
	}
	if err := etcdCall(ctx, s, "/v3/maintenance/status", struct{}{}, &st); err != nil {
		return "", err
	}
	if _, err := strconv.ParseUint(st.Header.MemberID, 10, 64); err != nil {
		return "", fmt.Errorf("status without a member id: %q", st.Header.MemberID)
	}
	return st.Header.MemberID, nil
}

// etcdCall posts req as JSON to the gRPC gateway of the member s, on a
// connection of its own, and decodes its reply into reply (unless nil),
// within 5s.
func etcdCall(ctx context.Context, s *Server, path string, req, reply any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, EtcdEndpoint(s)+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	r.Close = true // no idle connection outlives the call (the chaos suite checks for leaks)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(nil, resp.Body, 1<<20)); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", path, resp.Status, strings.TrimSpace(buf.String()))
	}
	if reply == nil {
		return nil
	}
	return json.Unmarshal(buf.Bytes(), reply)
}
