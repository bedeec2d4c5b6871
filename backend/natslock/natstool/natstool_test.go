package natstool

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/natslock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/doctor/doctortest"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/floor/floortest"
	"github.com/distlock/distlock/storetool/migrate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server starts a nats-server and returns it with a JetStream client of it.
func server(t *testing.T) (*testserver.Server, jetstream.JetStream) {
	t.Helper()
	s := testserver.NATS(t)
	nc, err := nats.Connect(testserver.NATSURL(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestGoodBucket: a bucket that migrate made has no danger; one replica
// warns.
func TestGoodBucket(t *testing.T) {
	s, _ := server(t)
	u := testserver.NATSURL(s) + "?bucket=locks"
	res, err := migrate.Run(testContext(t), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("migrate: %+v", res)
	r := doctortest.Run(t, u, doctor.Options{})
	if r.Store != "nats" || r.Count(doctor.Danger) != 0 {
		t.Fatalf("report:\n%s", doctortest.Dump(r))
	}
	doctortest.Want(t, r, "jetstream", doctor.Info, "per-key time to live supported")
	doctortest.Want(t, r, "ttl", doctor.Info, "per-key time to live on")
	doctortest.Want(t, r, "storage", doctor.Info, "file storage")
	doctortest.Want(t, r, "replicas", doctor.Warning, "1 replica(s)")
}

// TestUnfitBuckets: a missing bucket, one without per-key time to live, in
// memory, and of a long history are each named.
func TestUnfitBuckets(t *testing.T) {
	s, js := server(t)
	ctx := testContext(t)
	url := func(bucket string) string { return testserver.NATSURL(s) + "?bucket=" + bucket }
	f := doctortest.Want(t, doctortest.Run(t, url("nosuch"), doctor.Options{}), "bucket", doctor.Danger, `no Key-Value bucket "nosuch"`)
	if f.Fix == "" {
		t.Errorf("no fix: %+v", f)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "plain"}); err != nil {
		t.Fatal(err)
	}
	doctortest.Want(t, doctortest.Run(t, url("plain"), doctor.Options{}), "ttl", doctor.Danger, "per-key time to live off")
	if err := natslock.CreateBucket(ctx, js, "mem", natslock.BucketOptions{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	doctortest.Want(t, doctortest.Run(t, url("mem"), doctor.Options{}), "storage", doctor.Warning, "memory storage")
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "history", History: 5, LimitMarkerTTL: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	doctortest.Want(t, doctortest.Run(t, url("history"), doctor.Options{}), "history", doctor.Warning, "history 5")
}

func TestInvalidURLs(t *testing.T) {
	doctortest.InvalidURLs(t, func(a string) []string {
		return []string{"nats://", "nats://" + a + "/locks", "nats://" + a + "?bucket=a.b", "nats://" + a + "?colour=red",
			"nats://" + a + "?request_timeout=soon", "nats://" + a + ",?bucket=x"}
	})
}

// TestRefusedAsOpen: a URL natslock refuses, doctor refuses in its words.
func TestRefusedAsOpen(t *testing.T) {
	doctortest.Refused(t, natslock.ParseURL, "nats://127.0.0.1:1?colour=red", "nats://127.0.0.1:1?bucket=a.b")
}

func TestUnreachable(t *testing.T) {
	doctortest.Unreachable(t, func(a string) []string { return []string{"nats://" + a + "?connect_timeout=1s"} })
}

func TestFloor(t *testing.T) {
	s, js := server(t)
	if err := natslock.CreateBucket(testContext(t), js, "locks", natslock.BucketOptions{}); err != nil {
		t.Fatal(err)
	}
	floortest.Run(t, testserver.NATSURL(s)+"?bucket=locks", floor.Config{})
}

// TestFloorRefusedAsOpen: a URL natslock refuses, the floor refuses in its
// words.
func TestFloorRefusedAsOpen(t *testing.T) {
	floortest.Refused(t, natslock.ParseURL, "nats://127.0.0.1:1?colour=red", "nats://127.0.0.1:1?bucket=a.b")
}
