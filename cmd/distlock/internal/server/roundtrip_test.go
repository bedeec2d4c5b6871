package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// A stock grpc-go client over HTTP/2 without TLS: acquire, inspect, renew,
// watch, release, and the codes of a held key and a missing token.
func TestGRPCClient(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{WatchInterval: 50 * time.Millisecond})
		conn, err := grpc.NewClient(strings.TrimPrefix(e.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		authed := metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer "+alphaClient)
		key := keyFor(t, "k")

		var acq distlockv1.AcquireResponse
		err = conn.Invoke(authed, distlockv1connect.LockServiceAcquireProcedure,
			&distlockv1.AcquireRequest{Key: key, Lease: durationpb.New(10 * time.Second), Owner: "grpc-go"}, &acq)
		if err != nil || acq.GetToken() == "" || acq.GetFence() == 0 || acq.GetLease().AsDuration() != 10*time.Second {
			t.Fatalf("Acquire = %v, %v; want a token, a fence and the 10s lease", &acq, err)
		}
		if until := time.Until(acq.GetExpiresAt().AsTime()); until <= 0 || until > 10*time.Second {
			t.Errorf("expires_at is %v from now, want within the 10s lease", until)
		}

		var again distlockv1.AcquireResponse
		err = conn.Invoke(authed, distlockv1connect.LockServiceAcquireProcedure, &distlockv1.AcquireRequest{Key: key}, &again)
		if status.Code(err) != codes.Aborted || !strings.Contains(status.Convert(err).Message(), key) {
			t.Errorf("second Acquire: %v, want Aborted naming the key", err)
		}

		var ins distlockv1.InspectResponse
		if err := conn.Invoke(authed, distlockv1connect.LockServiceInspectProcedure, &distlockv1.InspectRequest{Key: key}, &ins); err != nil {
			t.Fatal(err)
		}
		if l := ins.GetLock(); !l.GetHeld() || l.GetFence() != acq.GetFence() || l.GetOwner() != "grpc-go" || l.GetKey() != key {
			t.Errorf("Inspect = %v, want %q held by grpc-go with fence %d", l, key, acq.GetFence())
		}

		var ren distlockv1.RenewResponse
		err = conn.Invoke(authed, distlockv1connect.LockServiceRenewProcedure,
			&distlockv1.RenewRequest{Key: key, Token: acq.GetToken(), Lease: durationpb.New(20 * time.Second)}, &ren)
		if err != nil || ren.GetLease().AsDuration() != 20*time.Second {
			t.Errorf("Renew = %v, %v; want the 20s lease", &ren, err)
		}

		// Watch over grpc-go: the release comes as an event.
		wctx, cancel := context.WithCancel(authed)
		defer cancel()
		stream, err := conn.NewStream(wctx, &grpc.StreamDesc{ServerStreams: true}, distlockv1connect.LockServiceWatchProcedure)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.SendMsg(&distlockv1.WatchRequest{Prefix: keyFor(t, "")}); err != nil {
			t.Fatal(err)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if h, err := stream.Header(); err != nil || len(h.Get("Distlock-Watch-Live")) == 0 {
			t.Fatalf("Watch header = %v, %v; want it once the watch is live", h, err)
		}
		events := make(chan *distlockv1.Event, 100)
		go func() {
			defer close(events)
			for {
				var res distlockv1.WatchResponse
				if stream.RecvMsg(&res) != nil {
					return
				}
				events <- res.GetEvent()
			}
		}()
		var rel distlockv1.ReleaseResponse
		if err := conn.Invoke(authed, distlockv1connect.LockServiceReleaseProcedure,
			&distlockv1.ReleaseRequest{Key: key, Token: acq.GetToken()}, &rel); err != nil {
			t.Fatal(err)
		}
		ev := nextEvent(t, events, key)
		if ev.GetType() != distlockv1.Event_TYPE_RELEASED || ev.GetLock().GetFence() != acq.GetFence() || ev.GetLock().GetOwner() != "grpc-go" {
			t.Errorf("event %v, want the release of fence %d held by grpc-go", ev, acq.GetFence())
		}
		cancel()

		err = conn.Invoke(ctx(t), distlockv1connect.LockServiceInspectProcedure, &distlockv1.InspectRequest{Key: key}, &ins)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("Inspect without a token: %v, want Unauthenticated", err)
		}
	})
}

// Plain HTTP/1.1 POSTs of JSON, as curl would send them.
func TestJSONOverHTTP(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		key := keyFor(t, "k")
		post := func(method, token, body string) (int, map[string]any) {
			t.Helper()
			req, err := http.NewRequestWithContext(ctx(t), http.MethodPost, e.url+"/distlock.v1.LockService/"+method, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			res, err := e.h1.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if res.ProtoMajor != 1 {
				t.Errorf("%s answered over HTTP/%d, want HTTP/1.1", method, res.ProtoMajor)
			}
			data, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := json.Unmarshal(data, &v); err != nil {
				t.Fatalf("%s: %d %q is not JSON: %v", method, res.StatusCode, data, err)
			}
			return res.StatusCode, v
		}

		code, acq := post("Acquire", alphaClient, `{"key":"`+key+`","lease":"10s","owner":"curl","labels":{"team":"web"}}`)
		if code != http.StatusOK || acq["token"] == nil || acq["fence"] == nil || acq["lease"] != "10s" || acq["expiresAt"] == nil {
			t.Fatalf("Acquire: %d %v", code, acq)
		}
		code, ins := post("Inspect", alphaViewer, `{"key":"`+key+`"}`)
		lock, _ := ins["lock"].(map[string]any)
		if code != http.StatusOK || lock["held"] != true || lock["owner"] != "curl" || lock["fence"] != acq["fence"] {
			t.Errorf("Inspect: %d %v", code, ins)
		}
		if labels, _ := lock["labels"].(map[string]any); labels["team"] != "web" {
			t.Errorf("Inspect labels: %v, want team=web", lock["labels"])
		}
		if bytes.Contains([]byte(e.logs.String()), []byte(acq["token"].(string))) {
			t.Error("the access log shows a lock's token")
		}
		code, held := post("Acquire", betaClient, `{"key":"`+key+`","wait":"0.2s"}`)
		if code != http.StatusOK {
			t.Errorf("beta's Acquire of the same name: %d %v; tenants must not collide", code, held)
		}
		code, res := post("Acquire", alphaClient, `{"key":"`+key+`","wait":"0.2s"}`)
		if code != http.StatusConflict || res["code"] != "aborted" || !strings.Contains(res["message"].(string), "held") {
			t.Errorf("Acquire of a held key: %d %v, want 409 aborted saying held", code, res)
		}
		code, _ = post("Release", alphaClient, `{"key":"`+key+`","token":"`+acq["token"].(string)+`"}`)
		if code != http.StatusOK {
			t.Errorf("Release: %d", code)
		}
		code, res = post("Release", alphaClient, `{"key":"`+key+`","token":"`+acq["token"].(string)+`"}`)
		if code != http.StatusNotFound || res["code"] != "not_found" {
			t.Errorf("second Release: %d %v, want 404 not_found", code, res)
		}
		code, res = post("Inspect", "", `{"key":"`+key+`"}`)
		if code != http.StatusUnauthorized || res["code"] != "unauthenticated" {
			t.Errorf("Inspect without a token: %d %v, want 401 unauthenticated", code, res)
		}
	})
}

// The same calls through Connect's client in each protocol it speaks:
// Connect (protobuf and JSON), gRPC and gRPC-Web, and Watches that Shutdown
// ends with Unavailable in each, one of them before it sent anything.
func TestProtocols(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		for name, opts := range map[string][]connect.ClientOption{
			"connect-proto": nil,
			"connect-json":  {connect.WithProtoJSON()},
			"grpc":          {connect.WithGRPC()},
			"grpc-web":      {connect.WithGRPCWeb()},
			"grpc-web-json": {connect.WithGRPCWeb(), connect.WithProtoJSON()},
		} {
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, st, server.Limits{})
				api := e.api(alphaClient, opts...)
				key := keyFor(t, "k")
				events, watchErr := watch(t, api, key)
				_, idleErr := watch(t, api, keyFor(t, "idle/")) // ends before any event
				acq := acquire(t, api, &distlockv1.AcquireRequest{Key: key})
				if l := inspect(t, api, key); !l.GetHeld() || l.GetFence() != acq.GetFence() {
					t.Errorf("Inspect = %v, want held with fence %d", l, acq.GetFence())
				}
				_, err := api.Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: key}))
				wantCode(t, "second Acquire", err, connect.CodeAborted)
				if _, err := api.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: key, Token: acq.GetToken()})); err != nil {
					t.Fatal(err)
				}
				for _, typ := range []distlockv1.Event_Type{distlockv1.Event_TYPE_ACQUIRED, distlockv1.Event_TYPE_RELEASED} {
					if ev := nextEvent(t, events, key); ev.GetType() != typ || ev.GetLock().GetFence() != acq.GetFence() {
						t.Errorf("watch event %v, want %v with fence %d", ev, typ, acq.GetFence())
					}
				}
				_, err = e.api("", opts...).Inspect(ctx(t), connect.NewRequest(&distlockv1.InspectRequest{Key: key}))
				wantCode(t, "Inspect without a token", err, connect.CodeUnauthenticated)
				e.srv.Shutdown()
				wantCode(t, "the Watch at Shutdown", watchErr(), connect.CodeUnavailable)
				wantCode(t, "a Watch without events at Shutdown", idleErr(), connect.CodeUnavailable)
			})
		}
	})
}
