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
