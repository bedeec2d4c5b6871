package redlocktool

import (
	"net"
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/redlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/doctor/doctortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNodesAndQuorum: every node is inspected as a lone server would be,
// without the lone server's note on replicas, and losing nodes is judged
// against the quorum.
func TestNodesAndQuorum(t *testing.T) {
	nodes := []*testserver.Server{testserver.Redis(t), testserver.Redis(t),
		testserver.Redis(t, "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "allkeys-lru", "--maxmemory", "64mb")}
	u := "redlock://" + nodes[0].Addr() + "," + nodes[1].Addr() + "," + nodes[2].Addr() + "/1?prefix=app:&drift_rate=0.02&node_timeout=100ms&client_name=doctor"
	r := doctortest.Run(t, u, doctor.Options{})
	if n := len(doctortest.Findings(r, "persistence")); n != 3 {
		t.Errorf("persistence checked on %d nodes, want 3:\n%s", n, doctortest.Dump(r))
	}
	doctortest.Want(t, r, "persistence", doctor.Danger, "no persistence")
	doctortest.Want(t, r, "maxmemory-policy", doctor.Danger, "allkeys-lru")
	doctortest.Want(t, r, "quorum", doctor.Info, "3 nodes, 3 answering, quorum 2: tolerates 1 failed nodes")
	if f := doctortest.Findings(r, "replicas"); len(f) != 0 {
		t.Errorf("a Redlock node without replicas is reported: %+v", f)
	}
	if r.Store != "redis" {
		t.Errorf("store %q, want redis", r.Store)
	}

	nodes[0].Kill()
	r = doctortest.Run(t, u, doctor.Options{})
	doctortest.Want(t, r, "quorum", doctor.Warning, "3 nodes, 2 answering")
	doctortest.Want(t, r, "node", doctor.Warning, "does not answer")
	nodes[1].Kill()
	doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "quorum", doctor.Danger, "3 nodes, 1 answering")
}

func TestInvalidURLs(t *testing.T) {
	doctortest.InvalidURLs(t, func(a string) []string {
		return []string{"redlock://" + a, "redlock://" + a + ",127.0.0.1:1", "redlock://" + a + "," + a + ",127.0.0.1:1",
			"redlock://" + a + ",127.0.0.1:1,localhost", "redlock://" + a + ",127.0.0.1:1,127.0.0.1:2/x"}
	})
}

// TestRefusedAsOpen: a URL redlock refuses, doctor refuses in its words,
// a node's included.
func TestRefusedAsOpen(t *testing.T) {
	const nodes = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
	doctortest.Refused(t, redlock.ParseURL, "redlock://"+nodes+"?colour=red", "redlock://"+nodes+"?drift_rate=x",
		"redlock://"+nodes+"/x", "redlock://"+nodes+"?write_timeout=soon", "redlock://127.0.0.1:1,127.0.0.1:2", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:1")
}

func TestUnreachable(t *testing.T) {
	doctortest.Unreachable(t, func(a string) []string {
		host, _, _ := net.SplitHostPort(a)
		return []string{"redlock://" + a + "," + host + ":1," + host + ":2"}
	})
}
