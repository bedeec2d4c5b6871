package driver

import (
	"net/url"
	"strings"
)

// shown replaces a secret in a URL or connection string that is printed.
const shown = "xxxxx"

// RedactURL returns u as text with every secret it carries replaced by
// "xxxxx": the password of its user information, and the value of every
// query parameter whose name says it holds a secret (password, token,
// secret, access key, ...). Print store URLs only through it.
func RedactURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		if _, has := c.User.Password(); has {
			c.User = url.UserPassword(c.User.Username(), shown)
		}
	}
	if c.RawQuery != "" {
		q := c.Query()
		changed := false
		for name, values := range q {
			if secretName(name) {
				for i := range values {
					values[i] = shown
				}
				changed = true
			}
		}
		if changed {
			c.RawQuery = q.Encode()
		}
	}
	return c.String()
}

// Redact returns raw, a store URL or a key=value connection string
// (host=db password=...), for a message, with its secrets replaced as
// RedactURL replaces them. A URL that does not parse is shown by its scheme
// alone, since where its secrets are cannot be told.
func Redact(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && strings.Contains(raw, "://") {
		return RedactURL(u)
	}
	if scheme, _, ok := strings.Cut(raw, "://"); ok {
		return scheme + "://(a URL that does not parse, not shown)"
	}
	return redactKeyValues(raw)
}

// redactKeyValues replaces the secret values of a key=value connection
// string, whose values may be quoted with ' (libpq's form).
func redactKeyValues(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			b.WriteString(s[i:])
			break
		}
		key := strings.TrimSpace(s[i : i+eq])
		b.WriteString(s[i : i+eq+1])
		i += eq + 1
		end := valueEnd(s, i)
		if secretName(key) {
			b.WriteString(shown)
		} else {
			b.WriteString(s[i:end])
		}
		i = end
	}
	return b.String()
}

// valueEnd returns where the value that starts at i ends: after its closing
// quote, or at the next space.
func valueEnd(s string, i int) int {
	if i < len(s) && s[i] == '\'' {
		for j := i + 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				j++
			case '\'':
				return j + 1
			}
		}
		return len(s)
	}
	if sp := strings.IndexAny(s[i:], " \t\n"); sp >= 0 {
		return i + sp
	}
	return len(s)
}

// secretName reports whether a parameter of this name holds a secret.
func secretName(name string) bool {
	n := strings.ToLower(name)
	for _, word := range []string{"pass", "pwd", "secret", "token", "key", "auth", "credential"} {
		if strings.Contains(n, word) {
			return true
		}
	}
	return false
}
