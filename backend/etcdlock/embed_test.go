package etcdlock_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/distlock/distlock/internal/testserver"
)

// embeddedEtcd starts an etcd server inside the test process, as the lock
// service does, on loopback ports in a temp dir, and returns its client URL.
func embeddedEtcd(t testing.TB) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "embedded"
	cfg.Dir = t.TempDir()
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("%s:%d", testserver.Host, testserver.FreePort(t))}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("%s:%d", testserver.Host, testserver.FreePort(t))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 50, 500 // as the test servers: a 1s lease floor
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("embedded etcd: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("embedded etcd not ready after 30s")
	}
	return client.String()
}
