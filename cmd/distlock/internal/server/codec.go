package server

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// strictJSON is the JSON codec of the service. Connect's own ignores fields
// it does not know, so a misspelt field ("leese") would take a lock on terms
// the caller did not ask for; this one refuses the request with
// InvalidArgument naming the field. The price: a client built against a
// newer API cannot send this server a field it lacks, which for locks is the
// safe way round.
type strictJSON struct{ name string }

// jsonCodecs replace Connect's JSON codecs, under both names it registers.
func jsonCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(strictJSON{"json"}),
		connect.WithCodec(strictJSON{"json; charset=utf-8"}),
	}
}

// Name is the codec's content subtype.
func (c strictJSON) Name() string { return c.name }

// Marshal encodes a response as Connect's own codec does.
func (strictJSON) Marshal(msg any) ([]byte, error) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", msg)
	}
	return protojson.Marshal(m)
}

// Unmarshal decodes a request, refusing unknown fields.
func (strictJSON) Unmarshal(data []byte, msg any) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", msg)
	}
	if len(data) == 0 {
		return errors.New("an empty body is not a JSON object")
	}
	if err := protojson.Unmarshal(data, m); err != nil {
		return fmt.Errorf("the request is not a %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}
