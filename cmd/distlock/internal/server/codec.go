package server

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"

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
		if esc, ok := loneSurrogate(data); ok {
			// protojson calls this "unexpected EOF", which misleads.
			return fmt.Errorf("the request is not a %s: the escape %s is half of a UTF-16 pair, not a character: a string must be valid UTF-8",
				m.ProtoReflect().Descriptor().FullName(), esc)
		}
		return fmt.Errorf("the request is not a %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// loneSurrogate returns the first \uXXXX escape in data that is a UTF-16
// surrogate without its other half.
func loneSurrogate(data []byte) (string, bool) {
	unit := func(i int) (rune, bool) { // the \uXXXX escape at data[i:], if any
		if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		r, ok := unit(i)
		if !ok {
			i++ // an escaped character such as \\ or \"
			continue
		}
		if utf16.IsSurrogate(r) {
			if low, ok := unit(i + 6); r < 0xdc00 && ok && low >= 0xdc00 && low <= 0xdfff {
				i += 11
				continue
			}
			return string(data[i : i+6]), true
		}
		i += 5
	}
	return "", false
}
