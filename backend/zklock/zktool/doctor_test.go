package zktool

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/doctor/doctortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestZooKeeperSessionTimeout(t *testing.T) {
	s := testserver.ZooKeeper(t) // bounds 1s to 10s
	u := "zk://" + s.Addr() + "/app"
	r := doctortest.Run(t, u, doctor.Options{})
	doctortest.Clean(t, r)
	doctortest.Want(t, r, "session-timeout", doctor.Info, "asked 10s, granted 10s; the server grants 1s to 10s")
	doctortest.Want(t, r, "mode", doctor.Info, "standalone")

	f := doctortest.Want(t, doctortest.Run(t, u+"?session_timeout=15s", doctor.Options{}), "session-timeout", doctor.Warning, "asked 15s, granted 10s")
	if !strings.Contains(f.Consequence, "margin") {
		t.Errorf("consequence: %s", f.Consequence)
	}
	doctortest.Want(t, doctortest.Run(t, u+"?session_timeout=30s", doctor.Options{}), "session-timeout", doctor.Danger, "asked 30s, granted 10s")
	doctortest.Want(t, doctortest.Run(t, u+"?session_timeout=1s&dial_timeout=2s&request_timeout=2s", doctor.Options{}), "session-timeout", doctor.Info, "asked 1s, granted 1s")
}

func TestInvalidURLs(t *testing.T) {
	doctortest.InvalidURLs(t, func(a string) []string { return []string{"zk:///", "zk://" + a + "?session_timeout=soon"} })
}

// TestRefusedAsOpen: a URL zklock refuses, doctor refuses in its words,
// a session timeout below zklock's minimum included.
func TestRefusedAsOpen(t *testing.T) {
	doctortest.Refused(t, zklock.ParseURL, "zk://127.0.0.1:1?colour=red", "zk://127.0.0.1:1?session_timeout=500ms",
		"zk://127.0.0.1:1?connect_timeout=1s", "zk://u@127.0.0.1:1")
}

func TestUnreachable(t *testing.T) {
	doctortest.Unreachable(t, func(a string) []string { return []string{"zk://" + a} })
}
