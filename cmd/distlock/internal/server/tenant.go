package server

import "strings"

// A tenant's keys live under tenantsRoot + tenant + "/"; its sessions under
// sessionsRoot + tenant + "/". Nothing a request says can leave them: the
// tenant comes from the caller's token, and a client key is appended.
const (
	tenantsRoot  = "tenants/"
	sessionsRoot = "sessions/"
)

// namespace is the store prefix of tenant's keys.
func namespace(tenant string) string { return tenantsRoot + tenant + "/" }

// storeKey is the store key of tenant's client key key.
func storeKey(tenant, key string) string { return namespace(tenant) + key }

// splitStoreKey returns the tenant and client key of a store key under
// tenantsRoot, and false for any other key.
func splitStoreKey(sk string) (tenant, key string, ok bool) {
	rest, ok := strings.CutPrefix(sk, tenantsRoot)
	if !ok {
		return "", "", false
	}
	tenant, key, ok = strings.Cut(rest, "/")
	return tenant, key, ok && tenant != "" && key != ""
}

// sessionKey is the store key of tenant's session with handle h.
func sessionKey(tenant, h string) string { return sessionsRoot + tenant + "/" + h }

// membersOf is the store prefix of the members of tenant's session with
// handle h: a key per lock of the session.
func membersOf(tenant, h string) string { return sessionKey(tenant, h) + "/" }

// memberKey is the store key of the member of tenant's session with handle
// h that stands for its lock on key with nonce: fixed in length whatever
// the key, which its labels carry.
func memberKey(tenant, h, key, nonce string) string {
	return membersOf(tenant, h) + digest(tokenLen, "distlock-member", key, nonce)
}
