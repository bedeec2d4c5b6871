package mysqllock

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// MaxNameLen is the longest lock name MySQL accepts (GET_LOCK).
const MaxNameLen = 64

// namePlain and nameHashed start the two forms of lock name, so that no
// plain name equals a hashed one.
const (
	namePlain  = "dl:"
	nameHashed = "dl#"
)

// base32 in lower case: a hashed name has no letter whose case could fold.
var hashEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// LockName returns the GET_LOCK name of key: "dl:" and the key itself when
// the key fits in MaxNameLen with it and holds only lower-case ASCII letters,
// digits and / . _ - : (readable in SHOW PROCESSLIST, and so other programs
// can take the same lock with SELECT GET_LOCK(name, timeout)); else "dl#"
// and the SHA-256 of the key in lower-case base32 (55 characters). MySQL
// compares lock names without regard to case (and MariaDB's documentation
// says so too), so a key with an upper-case letter, or any other character a
// collation might fold, is always hashed: keys that differ only in case get
// different names. The holder table keeps the key itself. The name never
// changes between versions.
func LockName(key string) string {
	if len(namePlain)+len(key) <= MaxNameLen && plain(key) {
		return namePlain + key
	}
	sum := sha256.Sum256([]byte(key))
	return nameHashed + hashEncoding.EncodeToString(sum[:])
}

// plain reports whether every byte of key is one no collation folds.
func plain(key string) bool {
	return strings.IndexFunc(key, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && !strings.ContainsRune("/._-:", r)
	}) < 0
}
