package redislock

import (
	"strings"
	"testing"
)

func TestVersionCheck(t *testing.T) {
	for _, tc := range []struct {
		info string
		ok   bool
		want string // in the error
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", true, ""},
		{"redis_version:5.0.0\r\n", true, ""},
		{"redis_version:5.0\r\n", true, ""},
		{"redis_version:255.255.255\r\n", true, ""},
		{"redis_version:10.0.1\r\n", true, ""},
		{"redis_version:4.0.14\r\n", false, "found Redis 4.0.14, too old: the backend needs Redis 5.0.0 or later"},
		{"redis_version:3.2\r\n", false, "found Redis 3.2, too old"},
		{"redis_version:seven\r\n", false, `server version "seven"`},
		{"redis_version:7.0.0.1\r\n", false, `server version "7.0.0.1"`},
		{"# Server\r\nredis_mode:standalone\r\n", false, "no redis_version"},
	} {
		v, err := versionFromInfo(tc.info)
		if err == nil {
			err = needVersion(v, MinVersion)
		}
		if tc.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want ok=%v with %q", tc.info, err, tc.ok, tc.want)
		}
	}
}
