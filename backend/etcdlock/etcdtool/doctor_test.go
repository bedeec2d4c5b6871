package etcdtool

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/doctor/doctortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEtcdSingle(t *testing.T) {
	s := testserver.Etcd(t)
	r := doctortest.Run(t, "etcd://"+s.Addr()+"/app?dial_timeout=2s&request_timeout=2s", doctor.Options{})
	doctortest.Clean(t, r)
	doctortest.Want(t, r, "quorum", doctor.Info, "1 members, 1 answering, quorum 1: tolerates 0 failed members")
	doctortest.Want(t, r, "member-health", doctor.Info, "leader")
	doctortest.Want(t, r, "clock", doctor.Info, "server clock")
}

func TestEtcdEvenMembersAndLostQuorum(t *testing.T) {
	members := testserver.EtcdCluster(t, 2)
	u := "etcd://" + members[0].Addr() + "," + members[1].Addr()
	f := doctortest.Want(t, doctortest.Run(t, u, doctor.Options{}), "quorum", doctor.Warning, "2 members, 2 answering, quorum 2")
	if !strings.Contains(f.Consequence, "either member failing stops locking") {
		t.Errorf("consequence: %s", f.Consequence)
	}
	members[1].Kill()
	r := doctortest.Run(t, u, doctor.Options{Timeout: time.Second})
	doctortest.Want(t, r, "quorum", doctor.Danger, "2 members, 1 answering")
	stopped := false
	for _, f := range doctortest.Findings(r, "member-health") {
		stopped = stopped || f.Severity == doctor.Warning && strings.Contains(f.Seen, "member m1 does not answer")
	}
	if !stopped {
		t.Errorf("the stopped member is not reported:\n%s", doctortest.Dump(r))
	}
}

func TestInvalidURLs(t *testing.T) {
	doctortest.InvalidURLs(t, func(string) []string { return []string{"etcd:///x"} })
}

// TestRefusedAsOpen: a URL etcdlock refuses, doctor refuses in its words.
func TestRefusedAsOpen(t *testing.T) {
	doctortest.Refused(t, etcdlock.ParseURL, "etcd://127.0.0.1:1?colour=red", "etcd://127.0.0.1:1?dial_timeout=-1s",
		"etcd://user@127.0.0.1:1", "etcd://127.0.0.1:1/?request_timeout=0s")
}

func TestUnreachable(t *testing.T) {
	doctortest.Unreachable(t, func(a string) []string { return []string{"etcd://" + a} })
}
