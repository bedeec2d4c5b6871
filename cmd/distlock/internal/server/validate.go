package server

import (
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// Request checks. Each returns an InvalidArgument error naming the field and
// the key; none touches the store.

// reservedLabelPrefix begins the labels the server sets itself; a request
// may not.
const reservedLabelPrefix = "distlock."

// Labels the server keeps with a lock or a session.
const (
	labelLease   = "distlock.lease"   // the lease an Acquire asked for: Renew's default
	labelSession = "distlock.session" // the handle of the lock's session
	labelNonce   = "distlock.nonce"   // with the session's secret, makes the lock's token
	labelRequest = "distlock.request" // which request id granted the lock (requestLabel)
	labelTTL     = "distlock.ttl"     // a session's TTL
	labelMembers = "distlock.members" // a session whose locks each have a member key
	labelKey     = "distlock.key"     // a member's lock key
)

// Request id bounds, in bytes.
const (
	minRequestIDLen = 16
	maxRequestIDLen = 128
)

// maxReasonLen bounds a ForceRelease's reason, in bytes.
const maxReasonLen = 1024

// acquireArgs is a checked AcquireRequest.
type acquireArgs struct {
	key        string
	wait       time.Duration
	lease      time.Duration // the default if the request has none
	leaseGiven bool          // the request named its lease
	lockDelay  time.Duration
	owner      string
	businessID string
	labels     map[string]string
	requestID  string
	firstTry   bool // no earlier call with requestID can have been granted
	resumes    bool // the caller resumes a wait that ends without a grant
	sessionID  string
	extra      []distlock.Option // what the kind of hold adds (a writer's intent)
}

// checkAcquire checks everything an Acquire asks before any store call.
func (l Limits) checkAcquire(req *distlockv1.AcquireRequest) (acquireArgs, error) {
	a := acquireArgs{
		key: req.GetKey(), owner: req.GetOwner(), businessID: req.GetBusinessId(),
		requestID: req.GetRequestId(), firstTry: req.GetFirstTry(), resumes: req.GetResumes(), sessionID: req.GetSessionId(), lease: l.DefaultLease,
	}
	if err := l.checkKey(a.key); err != nil {
		return a, err
	}
	var err error
	if a.wait, err = checkDuration(a.key, "wait", req.GetWait(), 0, l.MaxWait); err != nil {
		return a, err
	}
	if req.GetLease() != nil && a.sessionID == "" {
		a.leaseGiven = true
		if a.lease, err = checkDuration(a.key, "lease", req.GetLease(), distlock.MinLease, l.MaxLease); err != nil {
			return a, err
		}
	}
	if a.lockDelay, err = checkDuration(a.key, "lock_delay", req.GetLockDelay(), 0, l.MaxLease); err != nil {
		return a, err
	}
	if err := l.checkText(a.key, "owner", a.owner); err != nil {
		return a, err
	}
	if err := l.checkText(a.key, "business_id", a.businessID); err != nil {
		return a, err
	}
	if err := l.checkLabels(a.key, req.GetLabels()); err != nil {
		return a, err
	}
	a.labels = req.GetLabels()
	if err := checkRequestID(a.key, a.requestID); err != nil {
		return a, err
	}
	if a.sessionID != "" && !validSessionID(a.sessionID) {
		return a, invalid("acquire %q: session_id is not a session id from OpenSession", a.key)
	}
	return a, nil
}

// checkKey checks a client key: a valid distlock key of at most MaxKeyLen
// bytes.
func (l Limits) checkKey(key string) error {
	if len(key) > l.MaxKeyLen {
		return invalid("key %q: %w: %d bytes, the maximum is %d", short(key), distlock.ErrInvalidKey, len(key), l.MaxKeyLen)
	}
	if err := distlock.ValidateKey(key); err != nil {
		return invalid("key %q: %w", key, err)
	}
	return nil
}

// shortLen is how much of a long key an error message quotes.
const shortLen = 64

// short returns key, or its first shortLen bytes (whole characters) and
// "..." if it is longer.
func short(key string) string {
	if len(key) <= shortLen {
		return key
	}
	cut := shortLen
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return key[:cut] + "..."
}

// checkPrefix checks a List's or Watch's key prefix: empty, or the start of
// a valid key.
func (l Limits) checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return l.checkKey(prefix)
}

// checkDuration converts a request's duration and checks it is within
// lo..hi; unset is zero.
func checkDuration(key, field string, d *durationpb.Duration, lo, hi time.Duration) (time.Duration, error) {
	if d == nil {
		if lo > 0 {
			return 0, invalid("key %q: %s is required", key, field)
		}
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid("key %q: %s: %w", key, field, err)
	}
	if secs := d.GetSeconds(); secs > int64(math.MaxInt64/time.Second) {
		// Past what a time.Duration holds, AsDuration would name another
		// value: name the one sent.
		return 0, invalid("key %q: %s %ds is over the maximum %v", key, field, secs, hi)
	}
	v := d.AsDuration()
	switch {
	case v < 0:
		return 0, invalid("key %q: %s %v is negative", key, field, v)
	case v < lo:
		return 0, invalid("key %q: %s %v is under the minimum %v", key, field, v, lo)
	case v > hi:
		return 0, invalid("key %q: %s %v is over the maximum %v", key, field, v, hi)
	}
	return v, nil
}

// checkText checks a free-text field: at most MaxLabelLen bytes, no control
// characters.
func (l Limits) checkText(key, field, v string) error {
	if len(v) > l.MaxLabelLen {
		return invalid("key %q: %s has %d bytes, the maximum is %d", key, field, len(v), l.MaxLabelLen)
	}
	if strings.ContainsFunc(v, unicode.IsControl) {
		return invalid("key %q: %s has a control character", key, field)
	}
	return nil
}

// checkLabels checks an Acquire's labels: at most MaxLabels, names
// non-empty and not reserved, names and values within MaxLabelLen.
func (l Limits) checkLabels(key string, labels map[string]string) error {
	if len(labels) > l.MaxLabels {
		return invalid("key %q: %d labels, the maximum is %d", key, len(labels), l.MaxLabels)
	}
	for name, value := range labels {
		if err := l.checkText(key, "label name", name); err != nil {
			return err
		}
		switch {
		case name == "":
			return invalid("key %q: a label has an empty name", key)
		case strings.HasPrefix(name, reservedLabelPrefix):
			return invalid("key %q: label %q: names beginning %q are reserved", key, name, reservedLabelPrefix)
		}
		if err := l.checkText(key, "label "+name, value); err != nil {
			return err
		}
	}
	return nil
}

// checkRequestID checks an Acquire's request id: empty, or 16 to 128 bytes
// without control characters.
func checkRequestID(key, id string) error {
	switch {
	case id == "":
		return nil
	case len(id) < minRequestIDLen || len(id) > maxRequestIDLen:
		return invalid("key %q: request_id has %d bytes, want %d to %d (a random UUID, say)", key, len(id), minRequestIDLen, maxRequestIDLen)
	case strings.ContainsFunc(id, unicode.IsControl):
		return invalid("key %q: request_id has a control character", key)
	}
	return nil
}

// validSessionID reports whether id has the form of a session's secret: 32
// lower-case hex characters.
func validSessionID(id string) bool {
	if len(id) != secretLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// checkSessionID checks the session id of a KeepAlive or CloseSession.
func checkSessionID(op, id string) error {
	if !validSessionID(id) {
		return invalid("%s: session_id is not a session id from OpenSession", op)
	}
	return nil
}
