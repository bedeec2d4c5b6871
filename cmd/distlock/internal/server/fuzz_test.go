package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
	"github.com/distlock/distlock/observe"
)

// storeCalls counts the store requests of a client, through its observer.
type storeCalls struct{ n atomic.Int64 }

func (c *storeCalls) AcquireStarted(ctx context.Context, _ observe.Event) context.Context {
	return ctx
}

func (c *storeCalls) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.StoreCall {
		c.n.Add(1)
	}
}

// FuzzAcquireRequest sends arbitrary Acquire bodies, as protobuf or JSON,
// to the handler. It never panics; a body that does not decode, or whose
// key, lease, wait, lock delay or labels are out of bounds, gets
// InvalidArgument; InvalidArgument never follows a store request; anything
// else is a grant or one of the codes a valid request can get. The store is
// memlock, in process, so that each input costs microseconds; run it with
//
//	cd cmd/distlock && go test -run '^$' -fuzz '^FuzzAcquireRequest$' -fuzztime 30s ./internal/server/
func FuzzAcquireRequest(f *testing.F) {
	seed := func(m *distlockv1.AcquireRequest) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		if j, err := protojson.Marshal(m); err == nil { // JSON cannot say every invalid duration
			f.Add(j, true)
		}
	}
	seed(&distlockv1.AcquireRequest{Key: "k"})
	seed(&distlockv1.AcquireRequest{Key: "orders/42", Lease: durationpb.New(10 * time.Second), Wait: durationpb.New(10 * time.Millisecond),
		LockDelay: durationpb.New(time.Second), Owner: "w", BusinessId: "b", Labels: map[string]string{"team": "x"},
		RequestId: "3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b"})
	seed(&distlockv1.AcquireRequest{Key: ""})
	seed(&distlockv1.AcquireRequest{Key: strings.Repeat("k", 440)})
	seed(&distlockv1.AcquireRequest{Key: "k", Lease: durationpb.New(-time.Second)})
	seed(&distlockv1.AcquireRequest{Key: "k", Lease: &durationpb.Duration{Seconds: 1, Nanos: -1}})
	seed(&distlockv1.AcquireRequest{Key: "k", Wait: durationpb.New(time.Hour)})
	seed(&distlockv1.AcquireRequest{Key: "k", Labels: map[string]string{"distlock.nonce": "x"}})
	seed(&distlockv1.AcquireRequest{Key: "k", SessionId: "0123456789abcdef0123456789abcdef"})
	seed(&distlockv1.AcquireRequest{Key: "k", SessionId: "0123456789ABCDEF0123456789ABCDEF"})
	seed(&distlockv1.AcquireRequest{Key: "a\x00b"})
	for _, s := range []string{`{"key":`, `{"key":"k","leese":"1s"}`, `{"key":"k","lease":"1e400s"}`, `null`, `[]`, `{"labels":{"":""}}`} {
		f.Add([]byte(s), true)
	}
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, false)
	f.Add([]byte{0x12, 0x02, 0x08}, false)

	calls := &storeCalls{}
	client := distlock.New(memlock.New(), distlock.WithObserver(calls))
	limits := server.Limits{MaxWait: 20 * time.Millisecond, RatePerTenant: math.Inf(1)}
	srv, err := server.New(server.Config{Client: client, InsecureNoAuth: true, Limits: limits})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		srv.Shutdown()
		_ = client.Close()
	})
	handler := srv.Handler()

	f.Fuzz(func(t *testing.T, body []byte, asJSON bool) {
		contentType := "application/proto"
		if asJSON {
			contentType = "application/json"
		}
		req := httptest.NewRequest(http.MethodPost, distlockv1connect.LockServiceAcquireProcedure, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		rec := httptest.NewRecorder()
		before := calls.n.Load()
		handler.ServeHTTP(rec, req)
		stored := calls.n.Load() - before

		code := "ok"
		if rec.Code != http.StatusOK {
			var e struct{ Code string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("HTTP %d with a body that is no Connect error: %q", rec.Code, rec.Body.Bytes())
			}
			code = e.Code
		}
		switch code {
		case "ok", "aborted", "not_found":
		case "failed_precondition": // a request id that an earlier input's other owner holds the key under
			if !bytes.Contains(rec.Body.Bytes(), []byte("request_id")) {
				t.Fatalf("FailedPrecondition not about a request id: %s", rec.Body.Bytes())
			}
		case "invalid_argument":
			if stored != 0 {
				t.Fatalf("InvalidArgument after %d store requests: %s", stored, rec.Body.Bytes())
			}
		default:
			t.Fatalf("code %s (HTTP %d): %s", code, rec.Code, rec.Body.Bytes())
		}
		if wantInvalid(body, asJSON, limits.MaxWait) && code != "invalid_argument" {
			t.Fatalf("an invalid request got %s: %s", code, rec.Body.Bytes())
		}
	})
}

// wantInvalid reports whether a request body is plainly invalid: it does
// not decode, or its key, durations or labels are out of bounds. It is an
// oracle independent of the server's checks, not a copy of them: it covers
// what is simple to state.
func wantInvalid(body []byte, asJSON bool, maxWait time.Duration) bool {
	var m distlockv1.AcquireRequest
	var err error
	if asJSON {
		err = protojson.Unmarshal(body, &m)
	} else {
		err = proto.Unmarshal(body, &m)
	}
	if err != nil || len(body) == 0 && asJSON {
		return true
	}
	neg := func(d *durationpb.Duration) bool { return d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) }
	for name := range m.GetLabels() {
		if strings.HasPrefix(name, "distlock.") || name == "" {
			return true
		}
	}
	return m.GetKey() == "" || len(m.GetKey()) > server.DefaultMaxKeyLen ||
		neg(m.GetWait()) || neg(m.GetLease()) || neg(m.GetLockDelay()) ||
		(m.GetWait() != nil && m.GetWait().AsDuration() > maxWait)
}
