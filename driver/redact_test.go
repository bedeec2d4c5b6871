package driver_test

import (
	"strings"
	"testing"

	"github.com/distlock/distlock/driver"
)

// Every form a store's secret takes in a URL or connection string is
// hidden, and what is not a secret stays readable.
func TestRedact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://app:s3cret@db:5432/app?sslmode=disable", "postgres://app:xxxxx@db:5432/app?sslmode=disable"},
		{"postgres://app@db/app?password=s3cret&sslmode=disable", "postgres://app@db/app?password=xxxxx&sslmode=disable"},
		{"redis://:s3cret@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"redis-sentinel://h1,h2/mymaster?sentinel_password=s3cret&db=2", "redis-sentinel://h1,h2/mymaster?db=2&sentinel_password=xxxxx"},
		{"dynamodb://127.0.0.1:8000/locks?region=us-east-1&access_key_id=AK&secret_access_key=s3cret", "dynamodb://127.0.0.1:8000/locks?access_key_id=xxxxx&region=us-east-1&secret_access_key=xxxxx"},
		{"distlock://127.0.0.1:7070?token=s3cret", "distlock://127.0.0.1:7070?token=xxxxx"},
		{"mysql://root:s3cret@127.0.0.1:3306/distlock", "mysql://root:xxxxx@127.0.0.1:3306/distlock"},
		{"etcd://127.0.0.1:2379/locks", "etcd://127.0.0.1:2379/locks"},
		{"host=db user=app password=s3cret dbname=app", "host=db user=app password=xxxxx dbname=app"},
		{"host=db password='s3 cr\\'et' dbname=app", "host=db password=xxxxx dbname=app"},
		{"postgres://app:p%zzs3cret@db/app", "postgres://(a URL that does not parse, not shown)"},
	} {
		got := driver.Redact(c.in)
		if got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(got, "s3") {
			t.Errorf("Redact(%q) = %q shows the secret", c.in, got)
		}
	}
}
