package natslock

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/distlock/distlock/driver"
)

// The headers natslock reads and writes besides the value.
const (
	hdrOp     = "KV-Operation"       // DEL or PURGE on a KV delete marker
	hdrMarker = "Nats-Marker-Reason" // on a marker the server left (MaxAge: a key's TTL ran out)
	hdrTTL    = "Nats-TTL"           // the message's time to live, in whole seconds
	hdrRollup = "Nats-Rollup"        // "sub": the message replaces every earlier one of its key
	// hdrFreedBy is the token whose release wrote a purge marker, which a
	// release repeated after a lost reply recognises.
	hdrFreedBy = "Distlock-Freed-By"
)

// record is the value of a held key: JSON, with short names.
type record struct {
	Token string `json:"t"`
	// Fence is the grant's fence: the stream sequence of the message that
	// granted it. A grant's own message cannot know its sequence and says
	// 0; each renewal, a later message, says it.
	Fence uint64 `json:"f,omitempty"`
	// TTLMillis is the time to live asked for with the message, for
	// Inspect (the server keeps it for whole seconds, rounded up).
	TTLMillis int64       `json:"ttl"`
	Meta      driver.Meta `json:"m,omitzero"`
}

// entry is the last message of a key, as the store holds it.
type entry struct {
	seq  uint64    // its stream sequence: the key's revision
	time time.Time // when the server stored it
	held bool      // a value, not a marker
	rec  record    // the value, when held
	// freedBy is the token that released the key with this marker, if a
	// release wrote it.
	freedBy string
}

// fence returns the fence of the hold e records.
func (e entry) fence() uint64 {
	if e.rec.Fence != 0 {
		return e.rec.Fence
	}
	return e.seq
}

// decodeEntry reads a key's last message.
func decodeEntry(seq uint64, at time.Time, h nats.Header, data []byte) (entry, error) {
	e := entry{seq: seq, time: at}
	if h.Get(hdrOp) != "" || h.Get(hdrMarker) != "" {
		e.freedBy = h.Get(hdrFreedBy)
		return e, nil
	}
	return decodeValue(seq, at, data)
}

// decodeValue reads a key's last message that is a value, not a marker.
func decodeValue(seq uint64, at time.Time, data []byte) (entry, error) {
	e := entry{seq: seq, time: at, held: true}
	if err := json.Unmarshal(data, &e.rec); err != nil || e.rec.Token == "" {
		return entry{}, fmt.Errorf("value at revision %d: not a lock's (%.64q)", seq, data)
	}
	return e, nil
}

// info describes the hold e records, with the time to live left as the
// local clock counts from the server's timestamp of the message.
func (e entry) info(key string, now time.Time) driver.Info {
	if !e.held {
		return driver.Info{Key: key}
	}
	ttl := time.Duration(e.rec.TTLMillis)*time.Millisecond - now.Sub(e.time)
	ttl = min(max(ttl, time.Millisecond), time.Duration(e.rec.TTLMillis)*time.Millisecond)
	return driver.Info{Key: key, Held: true, Fence: e.fence(), TTL: ttl, Meta: e.rec.Meta}
}

// ttlSeconds is ttl as the Nats-TTL header says it: whole seconds, rounded
// up, at least one (the server's floor), so that the store never keeps a
// hold for less than asked.
func ttlSeconds(ttl time.Duration) string {
	s := (ttl + time.Second - 1) / time.Second
	return fmt.Sprint(max(int64(s), 1))
}
