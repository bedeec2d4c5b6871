package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

// The lost channel's messages reach the holds they name: a forced
// release's notice the one hold of its key and token, with its reason; an
// earlier release's bare token only a token that holds one key; a request
// every hold of its token, its reason kept whole.
func TestHoldersNotice(t *testing.T) {
	var h holders
	a := h.hold("a", "tok", time.Minute)
	b := h.hold("b", "tok", time.Minute)
	solo := h.hold("c", "solo", time.Minute)

	h.notice("tok\ndeleted\nb")
	var loss *driver.Loss
	if !errors.As(context.Cause(b.lost), &loss) || loss.Reason != driver.LossDeleted {
		t.Fatalf("b's hold: cause %v, want deleted", context.Cause(b.lost))
	}
	if a.lost.Err() != nil {
		t.Fatal("the notice for b ended a's hold under the same token")
	}

	h.hold("b", "tok", time.Minute) // tok holds two keys again
	h.notice("tok")
	if a.lost.Err() != nil {
		t.Fatal("a bare token that holds two keys ended a hold")
	}
	h.notice("solo")
	if solo.lost.Err() == nil {
		t.Fatal("a bare token that holds one key did not end its hold")
	}

	h.notice("tok deploy at 02:00\nticket OPS-7")
	for _, l := range []*heldLock{a, h.hold("b", "tok", time.Minute)} {
		var req *driver.ReleaseRequest
		if !errors.As(context.Cause(l.requested), &req) || req.Reason != "deploy at 02:00\nticket OPS-7" {
			t.Fatalf("%s's hold: request %v, want the whole reason", l.key, context.Cause(l.requested))
		}
	}
}
