package server_test

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// Each bad request gets its exact code and a message, and changes nothing:
// the tenant's locks are the same before and after.
func TestBadInput(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		prefix := keyFor(t, "")
		held := acquire(t, api, &distlockv1.AcquireRequest{Key: prefix + "held", Lease: durationpb.New(time.Minute)})
		before := list(t, api, prefix)
		beforeAll := list(t, api, "")

		raw := func(contentType string, body []byte) (int, string, string) {
			t.Helper()
			return e.post(t, distlockv1connect.LockServiceAcquireProcedure, bytes.NewReader(body), int64(len(body)),
				http.Header{"Content-Type": {contentType}, "Authorization": {"Bearer " + alphaClient}})
		}
		big := strings.Repeat("x", 10<<20)
		protoBody, err := proto.Marshal(&distlockv1.AcquireRequest{Key: prefix + "p"})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name, contentType, body string
			status                  int
			code, message           string
		}{
			{"malformed JSON", "application/json", `{"key":"` + prefix + `k",`, 400, "invalid_argument", "unexpected EOF"},
			{"JSON of the wrong shape", "application/json", `["` + prefix + `k"]`, 400, "invalid_argument", "AcquireRequest"},
			{"empty body", "application/json", ``, 400, "invalid_argument", "empty"},
			{"malformed protobuf", "application/proto", "\x0a\xff\x01" + prefix, 400, "invalid_argument", "unmarshal"},
			{"protobuf cut short", "application/proto", string(protoBody[:len(protoBody)-3]), 400, "invalid_argument", "unmarshal"},
			{"10 MiB body", "application/json", `{"key":"` + big + `"}`, 413, "resource_exhausted", "over the limit of 1048576 bytes"},
			{"empty key", "application/json", `{"key":""}`, 400, "invalid_argument", "empty"},
			{"no key", "application/json", `{}`, 400, "invalid_argument", "empty"},
			{"10 KiB key", "application/json", `{"key":"` + prefix + strings.Repeat("k", 10<<10) + `"}`, 400, "invalid_argument", "the maximum is 439"},
			{"lone surrogate", "application/json", `{"key":"` + prefix + `a\ud800b"}`, 400, "invalid_argument", `\ud800 is half of a UTF-16 pair`},
			{"invalid UTF-8 in protobuf", "application/proto", string(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), prefix+"a\xffb")), 400, "invalid_argument", "invalid UTF-8"},
			{"control character", "application/json", `{"key":"` + prefix + `a\u0007b"}`, 400, "invalid_argument", "control character"},
			{"negative lease", "application/json", `{"key":"` + prefix + `k","lease":"-1s"}`, 400, "invalid_argument", "lease -1s is negative"},
			{"zero lease", "application/json", `{"key":"` + prefix + `k","lease":"0s"}`, 400, "invalid_argument", "under the minimum"},
			{"lease over the max", "application/json", `{"key":"` + prefix + `k","lease":"7200s"}`, 400, "invalid_argument", "over the maximum 1h0m0s"},
			{"lease past any duration", "application/json", `{"key":"` + prefix + `k","lease":"99999999999s"}`, 400, "invalid_argument", "lease 99999999999s is over the maximum"},
			{"negative wait", "application/json", `{"key":"` + prefix + `k","wait":"-0.5s"}`, 400, "invalid_argument", "wait -500ms is negative"},
			{"wait over the max", "application/json", `{"key":"` + prefix + `k","wait":"3600s"}`, 400, "invalid_argument", "wait 1h0m0s is over the maximum"},
			{"negative lock delay", "application/json", `{"key":"` + prefix + `k","lockDelay":"-1s"}`, 400, "invalid_argument", "lock_delay"},
			{"lease not a duration", "application/json", `{"key":"` + prefix + `k","lease":"soon"}`, 400, "invalid_argument", `invalid google.protobuf.Duration value "soon"`},
			{"unknown field", "application/json", `{"key":"` + prefix + `k","leese":"10s"}`, 400, "invalid_argument", `unknown field "leese"`},
			{"reserved label", "application/json", `{"key":"` + prefix + `k","labels":{"distlock.session":"x"}}`, 400, "invalid_argument", "reserved"},
			{"empty label name", "application/json", `{"key":"` + prefix + `k","labels":{"":"x"}}`, 400, "invalid_argument", "empty name"},
			{"long label", "application/json", `{"key":"` + prefix + `k","labels":{"a":"` + strings.Repeat("v", 300) + `"}}`, 400, "invalid_argument", "the maximum is 256"},
			{"short request id", "application/json", `{"key":"` + prefix + `k","requestId":"abc"}`, 400, "invalid_argument", "request_id"},
			{"bad session id", "application/json", `{"key":"` + prefix + `k","sessionId":"not-a-session"}`, 400, "invalid_argument", "session_id"},
		} {
			t.Run(c.name, func(t *testing.T) {
				status, code, msg := raw(c.contentType, []byte(c.body))
				if status != c.status || code != c.code || !strings.Contains(msg, c.message) {
					t.Errorf("HTTP %d %s %q, want HTTP %d %s containing %q", status, code, msg, c.status, c.code, c.message)
				}
				if len(msg) > 1024 {
					t.Errorf("a message of %d bytes: it should not echo the request", len(msg))
				}
			})
		}
		labels := make(map[string]string)
		for i := range 33 {
			labels[strings.Repeat("l", i+1)] = "v"
		}
		_, err = api.Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: prefix + "k", Labels: labels}))
		wantCode(t, "33 labels", err, connect.CodeInvalidArgument)
		_, err = e.api(alphaClient, connect.WithGRPC()).Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: big}))
		wantCode(t, "a 10 MiB key over gRPC", err, connect.CodeResourceExhausted)
		_, err = api.Renew(ctx(t), connect.NewRequest(&distlockv1.RenewRequest{Key: prefix + "held", Token: held.GetToken(), Lease: durationpb.New(-time.Second)}))
		wantCode(t, "Renew with a negative lease", err, connect.CodeInvalidArgument)
		_, err = api.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: prefix + "held"}))
		wantCode(t, "Release without a token", err, connect.CodeInvalidArgument)
		_, err = api.List(ctx(t), connect.NewRequest(&distlockv1.ListRequest{Prefix: prefix, PageToken: "not a token"}))
		wantCode(t, "List with a forged page token", err, connect.CodeInvalidArgument)
		_, err = api.List(ctx(t), connect.NewRequest(&distlockv1.ListRequest{Prefix: prefix, PageSize: -1}))
		wantCode(t, "List with a negative page size", err, connect.CodeInvalidArgument)
		_, err = e.api(opsAdmin).ForceRelease(ctx(t), connect.NewRequest(&distlockv1.ForceReleaseRequest{Key: prefix + "held", Tenant: "alpha"}))
		wantCode(t, "ForceRelease without a reason", err, connect.CodeInvalidArgument)
		_, err = e.api(opsAdmin).ForceRelease(ctx(t), connect.NewRequest(&distlockv1.ForceReleaseRequest{Key: prefix + "held", Tenant: "Alpha/..", Reason: "x"}))
		wantCode(t, "ForceRelease of a bad tenant", err, connect.CodeInvalidArgument)
		_, err = api.OpenSession(ctx(t), connect.NewRequest(&distlockv1.OpenSessionRequest{Ttl: durationpb.New(time.Millisecond)}))
		wantCode(t, "OpenSession with a 1ms TTL", err, connect.CodeInvalidArgument)

		if after := list(t, api, prefix); !slices.Equal(before, after) {
			t.Errorf("locks under %q: %v before the bad requests, %v after", prefix, before, after)
		}
		if afterAll := list(t, api, ""); len(afterAll) != len(beforeAll) {
			t.Errorf("the tenant had %d locks before the bad requests, %d after", len(beforeAll), len(afterAll))
		}
		if l := inspect(t, api, prefix+"held"); !l.GetHeld() || l.GetFence() != held.GetFence() {
			t.Errorf("the held lock after the bad requests: %v", l)
		}
		// The calls refused before any handler ran are logged and counted too.
		var malformed int
		for _, r := range e.logs.records(t, "call") {
			if r["method"] == "Acquire" && r["code"] == "invalid_argument" && r["tenant"] == "alpha" {
				malformed++
			}
		}
		if malformed < 20 {
			t.Errorf("%d Acquire calls logged invalid_argument, want every refused one", malformed)
		}
	})
}
