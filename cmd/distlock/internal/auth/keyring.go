// Package auth maps the lock service's bearer tokens to tenants and roles.
//
// A token file has one token a line:
//
//	# token                              tenant    role
//	4f1c0e8b9d2a7c6e5f3b1a0d9c8e7f6a     payments  client
//	b7e3d1f9a2c4e6b8d0f2a4c6e8b0d2f4     payments  viewer
//	5d2e8a1c7f4b9e3a6c0d8f2b5e1a7c4d     payments  tenant-admin
//	9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d     ops       admin
//
// Fields are separated by spaces or tabs; "#" starts a comment line; blank
// lines are ignored. A token is at least MinTokenLen characters, a tenant
// matches ^[a-z0-9][a-z0-9_-]{0,62}$, a role is viewer, client,
// tenant-admin (a client that may also force-release its own tenant's keys)
// or admin (every tenant). A token may appear once. Nothing in this package logs or prints a token, not
// even in the errors of a bad file.
package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// MinTokenLen is the shortest token a token file may hold.
const MinTokenLen = 16

// maxLineLen bounds a token file's line, so that a wrong file (a binary, say)
// fails on its first long line instead of being read into memory.
const maxLineLen = 4096

var tenantRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidTenant reports whether name is a valid tenant name.
func ValidTenant(name string) bool { return tenantRE.MatchString(name) }

// Identity is who a token speaks for.
type Identity struct {
	Tenant string
	Role   Role
	// Credential stands for the bearer token itself (a hex digest of it,
	// "" without one): what only the token's holder can present, to which
	// the server binds what a caller may claim again, such as its request
	// ids. It is never shown.
	Credential string
}

// Keyring is a set of bearer tokens, each with its Identity. It is immutable
// once loaded and safe for concurrent use.
type Keyring struct {
	byHash map[[sha256.Size]byte]entry
}

// entry is one token: its digest (kept to compare in constant time) and
// identity.
type entry struct {
	digest [sha256.Size]byte
	id     Identity
}

// Load reads a token file (see the package doc). An error names the file and
// the line, never the token.
func Load(path string) (*Keyring, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	k, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("auth: %s:%w", path, err)
	}
	return k, nil
}

// parse reads a token file's content; errors start with the line number.
func parse(data []byte) (*Keyring, error) {
	k := &Keyring{byHash: make(map[[sha256.Size]byte]entry)}
	lineOf := make(map[[sha256.Size]byte]int)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 256), maxLineLen)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fmt.Errorf("%d: %d fields, want 3: <token> <tenant> <role>", n, len(fields))
		}
		token, tenant, roleName := fields[0], fields[1], fields[2]
		if len(token) < MinTokenLen {
			return nil, fmt.Errorf("%d: the token has %d characters, the minimum is %d", n, len(token), MinTokenLen)
		}
		if !ValidTenant(tenant) {
			return nil, fmt.Errorf("%d: tenant %q does not match %s", n, tenant, tenantRE)
		}
		role, err := ParseRole(roleName)
		if err != nil {
			return nil, fmt.Errorf("%d: %w", n, err)
		}
		h := sha256.Sum256([]byte(token))
		if first, dup := lineOf[h]; dup {
			return nil, fmt.Errorf("%d: the token of line %d again", n, first)
		}
		lineOf[h] = n
		k.byHash[h] = entry{digest: h, id: Identity{Tenant: tenant, Role: role, Credential: hex.EncodeToString(h[:])}}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%d: %w", n+1, err)
	}
	return k, nil
}

// Lookup returns the identity of a bearer token. Tokens are found by their
// SHA-256 digests, never compared as text, and the digest found is checked
// again in constant time, so the time Lookup takes does not tell how much of
// a guessed token was right.
func (k *Keyring) Lookup(bearer string) (Identity, bool) {
	if k == nil || bearer == "" {
		return Identity{}, false
	}
	h := sha256.Sum256([]byte(bearer))
	e, ok := k.byHash[h]
	if !ok || subtle.ConstantTimeCompare(e.digest[:], h[:]) != 1 {
		return Identity{}, false
	}
	return e.id, true
}

// Identity returns the identity of the token whose Credential is
// credential, if the keyring holds it.
func (k *Keyring) Identity(credential string) (Identity, bool) {
	var h [sha256.Size]byte
	if k == nil || hex.DecodedLen(len(credential)) != len(h) {
		return Identity{}, false
	}
	if _, err := hex.Decode(h[:], []byte(credential)); err != nil {
		return Identity{}, false
	}
	e, ok := k.byHash[h]
	return e.id, ok
}

// Len returns the number of tokens in the keyring.
func (k *Keyring) Len() int {
	if k == nil {
		return 0
	}
	return len(k.byHash)
}
