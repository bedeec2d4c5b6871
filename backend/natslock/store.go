package natslock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The two requests every operation is made of: a write of a key's next
// message on the condition that its last one is a given revision, and a
// read of a key's last message from the stream's leader.

// write publishes a message on key's subject if the key's last revision
// is expect (0: the key has no message), and returns the new revision. A
// refusal of the condition is errStale.
func (b *Backend) write(ctx context.Context, ekey string, h nats.Header, data []byte, expect uint64) (uint64, error) {
	m := &nats.Msg{Subject: b.subjects + ekey, Header: h, Data: data}
	ack, err := b.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(expect))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return 0, errStale
	}
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// errStale is a write refused because the key's last revision was not the
// one expected.
var errStale = errors.New("the key's revision changed")

// msgGetResponse is JetStream's answer to a STREAM.MSG.GET request.
type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error"`
	Message *struct {
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs"`
		Data     []byte    `json:"data"`
		Time     time.Time `json:"time"`
	} `json:"message"`
}

// last reads key's last message from the stream's leader, and reports
// false if the key has none. It asks the leader rather than using a
// direct get, which any replica may answer from behind.
func (b *Backend) last(ctx context.Context, ekey string) (entry, bool, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": b.subjects + ekey}) // a map of strings always encodes
	msg, err := b.nc.RequestWithContext(ctx, b.getSubject, req)
	if errors.Is(err, nats.ErrNoResponders) {
		return entry{}, false, fmt.Errorf("no JetStream answers for the bucket's stream %s: %w", b.stream, err)
	}
	if err != nil {
		return entry{}, false, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return entry{}, false, fmt.Errorf("read %s: %w", b.stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return entry{}, false, nil
	case resp.Error != nil:
		return entry{}, false, fmt.Errorf("read %s: %w", b.stream, resp.Error)
	case resp.Message == nil:
		return entry{}, false, fmt.Errorf("read %s: %w", b.stream, jetstream.ErrInvalidJetStreamResponse)
	}
	m := resp.Message
	var h nats.Header
	if len(m.Header) > 0 {
		if h, err = nats.DecodeHeadersMsg(m.Header); err != nil {
			return entry{}, false, fmt.Errorf("read %s: headers at revision %d: %w", b.stream, m.Sequence, err)
		}
	}
	e, err := decodeEntry(m.Sequence, m.Time, h, m.Data)
	return e, err == nil, err
}
