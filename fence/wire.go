package fence

import (
	"fmt"
	"net/url"
	"strconv"
)

// FormatToken returns the wire form of t that HTTP headers and gRPC metadata
// carry: the query-escaped key and the decimal fence.
func FormatToken(t Token) (escapedKey, fence string) {
	return url.QueryEscape(t.Key), strconv.FormatUint(t.Fence, 10)
}

// ParseToken reads a token from its wire form (FormatToken). A key that is
// empty or badly escaped, or a fence that is not a decimal above 0, is an
// error.
func ParseToken(escapedKey, fence string) (Token, error) {
	key, err := url.QueryUnescape(escapedKey)
	if err != nil || key == "" {
		return Token{}, fmt.Errorf("fence: bad key %q", escapedKey)
	}
	f, err := strconv.ParseUint(fence, 10, 64)
	if err != nil || f == 0 {
		return Token{}, fmt.Errorf("fence: bad fence %q for key %q", fence, key)
	}
	return Token{Key: key, Fence: f}, nil
}
