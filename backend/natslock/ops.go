package natslock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/distlock/distlock/driver"
)

// attempts bounds the rounds of an operation whose conditional write found
// that the key changed since it read it.
const attempts = 3

// markerTTL is how long the marker of a release or a force release stays:
// a release repeated after a lost reply recognises its own marker within
// it. Then the key has no message at all.
const markerTTL = time.Minute

// errChanging is the failure of a renewal that found the key rewritten,
// still by its token, at every attempt.
var errChanging = errors.New("the key changed at every attempt")

// Acquire takes req.Key in one conditional write: the key's first message,
// or the next after a marker, with a time to live of req.TTL. The fence is
// the revision that write got: the stream's sequence, which only grows. A
// refused write reads the key: a marker (a release, an expiry) is written
// over on the condition that it is still the last message, and a hold by
// req.Token (a repeat whose first reply was lost) is renewed for req.TTL
// and granted again with its fence.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	ekey := EscapeKey(req.Key)
	rec := record{Token: req.Token, TTLMillis: req.TTL.Milliseconds(), Meta: req.Meta}
	data, err := json.Marshal(rec)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("natslock: metadata: %w", err)
	}
	var fence uint64
	err = b.call(ctx, func(ctx context.Context) error {
		// The revision the write is conditional on: 0 for a key without
		// messages, or the marker of this backend's last release of it.
		expect := b.holds.marker(req.Key)
		for range attempts {
			rev, err := b.write(ctx, ekey, ttlHeader(req.TTL), data, expect)
			if err == nil {
				rec.Fence, fence = rev, rev
				b.holds.put(req.Key, hold{token: req.Token, rev: rev, rec: rec})
				return nil
			}
			if !errors.Is(err, errStale) {
				return err
			}
			e, found, err := b.last(ctx, ekey)
			switch {
			case err != nil:
				return err
			case !found: // no message, or the last marker expired meanwhile
				expect = 0
			case !e.held:
				expect = e.seq
			case e.rec.Token != req.Token:
				return driver.ErrNotAcquired
			default:
				err := b.rewrite(ctx, ekey, req.Key, e.hold(), req.TTL)
				if err == nil {
					fence = e.fence()
					return nil
				}
				if !errors.Is(err, errStale) {
					return err
				}
			}
		}
		return driver.ErrNotAcquired
	})
	if err != nil {
		return driver.Grant{}, b.fail(err)
	}
	return driver.Grant{Fence: fence}, nil
}

// hold is what a renewal of the hold e records writes over.
func (e entry) hold() hold {
	rec := e.rec
	rec.Fence = e.fence()
	return hold{token: rec.Token, rev: e.seq, rec: rec}
}

// rewrite writes h's value again with a time to live of ttl, on the
// condition that h's revision is still the key's last: errStale if not.
func (b *Backend) rewrite(ctx context.Context, ekey, key string, h hold, ttl time.Duration) error {
	h.rec.TTLMillis = ttl.Milliseconds()
	data, err := json.Marshal(h.rec)
	if err != nil {
		return err
	}
	rev, err := b.write(ctx, ekey, ttlHeader(ttl), data, h.rev)
	if err != nil {
		return err
	}
	h.rev = rev
	b.holds.put(key, h)
	return nil
}

// held reads key and returns token's hold of it, or driver.ErrNotHeld.
func (b *Backend) held(ctx context.Context, ekey, key, token string) (hold, error) {
	e, found, err := b.last(ctx, ekey)
	switch {
	case err != nil:
		return hold{}, err
	case !found || !e.held || e.rec.Token != token:
		b.holds.forget(key, token)
		return hold{}, driver.ErrNotHeld
	}
	return e.hold(), nil
}

// Renew writes the hold's value again with a time to live of ttl, on the
// condition that the revision this backend last wrote is still the key's;
// if it is not (or this backend wrote none), it reads the key first.
func (b *Backend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	ekey := EscapeKey(key)
	err := b.call(ctx, func(ctx context.Context) error {
		h, known := b.holds.get(key, token)
		for range attempts {
			if !known {
				var err error
				if h, err = b.held(ctx, ekey, key, token); err != nil {
					return err
				}
			}
			err := b.rewrite(ctx, ekey, key, h, ttl)
			if !errors.Is(err, errStale) {
				return err
			}
			known = false
		}
		return errChanging
	})
	return b.fail(err)
}

// Release ends token's hold of key with a purge marker, which removes the
// hold's message and expires after markerTTL, on the condition that the
// hold's revision is still the key's last. A release repeated after a lost
// reply finds its own marker and succeeds.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	ekey := EscapeKey(key)
	err := b.call(ctx, func(ctx context.Context) error {
		h, known := b.holds.get(key, token)
		for range attempts {
			if !known {
				e, found, err := b.last(ctx, ekey)
				switch {
				case err != nil:
					return err
				case found && !e.held && e.freedBy == token:
					return nil
				case !found || !e.held || e.rec.Token != token:
					b.holds.forget(key, token)
					return driver.ErrNotHeld
				}
				h = e.hold()
			}
			rev, err := b.write(ctx, ekey, purgeHeader(token), nil, h.rev)
			if err == nil {
				b.released(key, ekey, rev)
				return nil
			}
			if !errors.Is(err, errStale) {
				return err
			}
			known = false
		}
		return errChanging
	})
	return b.fail(err)
}

// ForceRelease ends the hold of key whatever token holds it, with a purge
// marker on the condition that the hold read is still the key's last, and
// returns the hold it ended. If key is not held it returns an error
// matching driver.ErrNotHeld and changes nothing. The holder learns of it
// at its next renewal.
func (b *Backend) ForceRelease(ctx context.Context, key string, _ driver.ForceOptions) (driver.Info, error) {
	ekey := EscapeKey(key)
	var info driver.Info
	err := b.call(ctx, func(ctx context.Context) error {
		for range attempts {
			e, found, err := b.last(ctx, ekey)
			switch {
			case err != nil:
				return err
			case !found || !e.held:
				return driver.ErrNotHeld
			}
			rev, err := b.write(ctx, ekey, purgeHeader(""), nil, e.seq)
			if err == nil {
				b.released(key, ekey, rev)
				info = e.info(key, time.Now())
				return nil
			}
			if !errors.Is(err, errStale) {
				return err
			}
		}
		return errChanging
	})
	if err != nil {
		return driver.Info{}, b.fail(err)
	}
	return info, nil
}

// Inspect reads key's last message from the stream's leader. A released
// or expired key is not held and reports no fence: its marker keeps none.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	var info driver.Info
	err := b.call(ctx, func(ctx context.Context) error {
		e, _, err := b.last(ctx, EscapeKey(key))
		info = e.info(key, time.Now())
		return err
	})
	if err != nil {
		return driver.Info{}, b.fail(err)
	}
	return info, nil
}

// ttlHeader is the header of a hold's message: its time to live.
func ttlHeader(ttl time.Duration) nats.Header {
	return nats.Header{hdrTTL: {ttlSeconds(ttl)}}
}

// purgeHeader is the header of a release's marker: a KV purge of the key
// that expires after markerTTL, naming the releasing token if there is one.
func purgeHeader(token string) nats.Header {
	h := nats.Header{hdrOp: {"PURGE"}, hdrRollup: {"sub"}, hdrTTL: {ttlSeconds(markerTTL)}}
	if token != "" {
		h.Set(hdrFreedBy, token)
	}
	return h
}
