package natslock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/natslock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// store is a bucket on real nats-servers, made by CreateBucket.
type store struct {
	servers []*testserver.Server
	bucket  string
}

// newStore starts one nats-server (file storage in its own directory) and
// makes the bucket "locks" on it.
func newStore(t testing.TB) store {
	t.Helper()
	st := store{servers: []*testserver.Server{testserver.NATS(t)}, bucket: "locks"}
	st.create(t, natslock.BucketOptions{})
	return st
}

// create makes st's bucket with o.
func (st store) create(t testing.TB, o natslock.BucketOptions) {
	t.Helper()
	if err := natslock.CreateBucket(testContext(t, 30*time.Second), st.js(t), st.bucket, o); err != nil {
		t.Fatal(err)
	}
}

// url is the nats:// URL of the bucket on the servers at addrs.
func (st store) url(addrs ...string) string {
	return "nats://" + strings.Join(addrs, ",") + "?bucket=" + st.bucket
}

func (st store) addrs() []string {
	var a []string
	for _, s := range st.servers {
		a = append(a, s.Addr())
	}
	return a
}

// conn returns a connection of the test's own to the servers, closed when
// the test ends.
func (st store) conn(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(testserver.NATSURL(st.servers...), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (st store) js(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(st.conn(t))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// kv returns the bucket through the plain Key-Value API, to look behind
// the backends.
func (st store) kv(t testing.TB) jetstream.KeyValue {
	t.Helper()
	kv, err := st.js(t).KeyValue(testContext(t, 10*time.Second), st.bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// open returns a backend that Open built, closed when the test ends.
func (st store) open(t testing.TB, opts ...natslock.Option) *natslock.Backend {
	return st.openAt(t, st.addrs(), opts...)
}

func (st store) openAt(t testing.TB, addrs []string, opts ...natslock.Option) *natslock.Backend {
	t.Helper()
	b, err := natslock.Open(testContext(t, 10*time.Second), st.url(addrs...), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// deleteKey purges key behind its holder's back, as an operator would.
func (st store) deleteKey(t testing.TB, key string) {
	t.Helper()
	if err := st.kv(t).Purge(testContext(t, 10*time.Second), natslock.EscapeKey(key)); err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	st := newStore(t)
	locktest.Run(t, locktest.Harness{
		NewBackend:   func(t testing.TB) driver.Backend { return st.open(t) },
		DeleteKey:    st.deleteKey,
		StoreAddr:    st.servers[0].Addr(),
		NewBackendAt: func(t testing.TB, addr string) driver.Backend { return st.openAt(t, []string{addr}) },
	})
}

func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var seq atomic.Int64

func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("test/%s/%d-%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano(), seq.Add(1))
}

// token returns a fresh 128-bit hex token.
func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
