package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
)

// Token and id sizes, in hex characters.
const (
	tokenLen  = 32 // 128 bits: a lock's token, a session's secret and handle
	nonceLen  = 16 // 64 bits: tells a session's locks of one key apart
	secretLen = tokenLen
)

// randomHex returns n random hex characters (n even).
func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// digest returns the first n hex characters of the SHA-256 of label and
// parts, each part preceded by a NUL byte.
func digest(n int, label string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(label))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))[:n]
}

// requestToken is the token of an Acquire of key with a request id, by a
// caller of tenant presenting credential for owner: the same caller's retry
// computes the same one, and nobody without the caller's bearer token can,
// whoever reads the request id in a log. Without auth every caller is an
// admin of one tenant and credential is empty.
func requestToken(tenant, credential, owner, key, requestID string) string {
	return digest(tokenLen, "distlock-request", tenant, credential, owner, key, requestID)
}

// requestLabel marks a lock granted under a request id (labelRequest), so
// that a retry can tell a grant of its own id from another's without the
// id being shown.
func requestLabel(tenant, key, requestID string) string {
	return digest(nonceLen, "distlock-request-id", tenant, key, requestID)
}

// sessionHandle is the public name of the session whose secret is secret: it
// labels the session's locks and names its store key, and tells nothing of
// the secret.
func sessionHandle(secret string) string { return digest(tokenLen, "distlock-session", secret) }

// sessionNonce is the nonce of a session's lock: derived from the request id
// when there is one, so that a retry finds the same token, else random.
func sessionNonce(requestID string) string {
	if requestID == "" {
		return randomHex(nonceLen)
	}
	return digest(nonceLen, "distlock-nonce", requestID)
}

// sessionLockToken is the token of a session's lock on key: only the
// session's secret and the lock's nonce (one of its labels) make it.
func sessionLockToken(secret, key, nonce string) string {
	return digest(tokenLen, "distlock-lock", secret, key, nonce)
}

// memberToken is the token of the member of a session's lock on key (see
// session.go): made as the lock's, but another, since a token names one
// acquisition.
func memberToken(secret, key, nonce string) string {
	return digest(tokenLen, "distlock-member", secret, key, nonce)
}
