package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// ZooKeeperTick is the tick of test ZooKeeper servers. Session timeouts are
// bounded by 2 and 20 ticks (1s to 10s).
const ZooKeeperTick = 500

// ZooKeeper starts a standalone ZooKeeper server (Debian's zookeeper
// package, on the installed Java).
func ZooKeeper(t testing.TB) *Server {
	t.Helper()
	jar := lookBinary(t, "zookeeper", "/usr/share/java/zookeeper.jar")
	java := lookBinary(t, "default-jre-headless", "java")
	s := &Server{Name: "zookeeper", Port: FreePort(t), Dir: tempDir(t, "zk")}
	cfg := filepath.Join(s.Dir, "zoo.cfg")
	conf := fmt.Sprintf("tickTime=%d\ndataDir=%s\nclientPort=%d\nclientPortAddress=%s\nadmin.enableServer=false\n"+
		"4lw.commands.whitelist=srvr\nforceSync=no\nmaxClientCnxns=0\n", ZooKeeperTick, filepath.Join(s.Dir, "data"), s.Port, Host)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	classpath := jar + ":" + filepath.Join(filepath.Dir(jar), "slf4j-simple.jar")
	s.command = func() *exec.Cmd {
		return exec.Command(java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
			"org.apache.zookeeper.server.ZooKeeperServerMain", cfg)
	}
	s.ready = func(ctx context.Context) error {
		// "ruok" says imok before sessions are served; "srvr" reports a
		// Mode only once they are.
		return exchange(ctx, s.Addr(), []byte("srvr"), []byte("Mode: "))
	}
	return newServer(t, s)
}
