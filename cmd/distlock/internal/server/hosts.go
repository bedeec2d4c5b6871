package server

import (
	"net"
	"net/http"
	"strings"
)

// LoopbackHostsOnly answers only requests addressed to a loopback name
// (localhost, 127.0.0.1 or another 127/8 address, [::1]), with any port,
// and refuses every other Host with 421 Misdirected Request. A service
// without auth serves behind it: a web page whose name an attacker rebinds
// to 127.0.0.1 (DNS rebinding) reaches the loopback port with its own name
// in Host, and would otherwise call the API, same-origin, as an admin.
func LoopbackHostsOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			http.Error(w, "distlock serve without auth answers only requests addressed to localhost, 127.0.0.1 or [::1]", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names a loopback address.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
