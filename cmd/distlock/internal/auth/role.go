package auth

import "fmt"

// Role is what a token may do. The zero Role allows nothing.
type Role uint8

// The roles of a token file, each allowing what the one before it does and more.
const (
	// Viewer reads: Inspect, List and Watch of its own tenant.
	Viewer Role = iota + 1
	// Client also takes locks: Acquire, Renew, Release and sessions.
	Client
	// TenantAdmin also force-releases its own tenant's keys.
	TenantAdmin
	// Admin also force-releases any tenant's keys and lists every tenant.
	Admin
)

// Action is a class of calls that a Role allows or not.
type Action uint8

// The actions, from the least to the most privileged.
const (
	// Read is Inspect, List and Watch within the caller's tenant.
	Read Action = iota + 1
	// Write is Acquire, Renew, Release, OpenSession, KeepAlive and CloseSession.
	Write
	// Force is ForceRelease within the caller's tenant.
	Force
	// Administer is ForceRelease and List across tenants.
	Administer
)

// ParseRole returns the Role named s: "viewer", "client", "tenant-admin" or
// "admin".
func ParseRole(s string) (Role, error) {
	switch s {
	case "viewer":
		return Viewer, nil
	case "client":
		return Client, nil
	case "tenant-admin":
		return TenantAdmin, nil
	case "admin":
		return Admin, nil
	}
	return 0, fmt.Errorf("auth: unknown role %q (want viewer, client, tenant-admin or admin)", s)
}

// String returns the role's name as a token file spells it.
func (r Role) String() string {
	switch r {
	case Viewer:
		return "viewer"
	case Client:
		return "client"
	case TenantAdmin:
		return "tenant-admin"
	case Admin:
		return "admin"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// Allows reports whether r may perform a.
func (r Role) Allows(a Action) bool {
	switch a {
	case Read:
		return r >= Viewer && r <= Admin
	case Write:
		return r >= Client && r <= Admin
	case Force:
		return r == TenantAdmin || r == Admin
	case Administer:
		return r == Admin
	}
	return false
}

// String names the action for error messages.
func (a Action) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	case Force:
		return "force-release"
	case Administer:
		return "administer other tenants"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}
