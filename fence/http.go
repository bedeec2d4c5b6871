package fence

import (
	"errors"
	"net/http"
)

// The headers that carry a fence over HTTP. The key is query-escaped.
const (
	HeaderFence = "Distlock-Fence"
	HeaderKey   = "Distlock-Fence-Key"
)

// Transport returns a RoundTripper that adds the token of each request's
// context (NewContext) to its headers, then calls base
// (http.DefaultTransport if nil). Requests without a token pass unchanged.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return transport{base}
}

type transport struct{ base http.RoundTripper }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, ok := FromContext(req.Context())
	if !ok {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context()) // a RoundTripper must not modify the request
	key, fence := FormatToken(tok)
	req.Header.Set(HeaderFence, fence)
	req.Header.Set(HeaderKey, key)
	return t.base.RoundTrip(req)
}

// Middleware checks the fence headers of each request with c before next
// runs: a stale fence gets 409 Conflict, malformed headers 400 Bad Request, a
// failing check 503; an accepted token is in the request's context
// (FromContext). Requests without fence headers pass unchecked: put the
// middleware only on routes that write, or reject them in next.
func Middleware(c Checker, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rawFence, rawKey := r.Header.Get(HeaderFence), r.Header.Get(HeaderKey)
		if rawFence == "" && rawKey == "" {
			next.ServeHTTP(w, r)
			return
		}
		tok, err := ParseToken(rawKey, rawFence)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch err := c.Check(r.Context(), tok); {
		case errors.Is(err, ErrStale):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), tok)))
		}
	})
}
