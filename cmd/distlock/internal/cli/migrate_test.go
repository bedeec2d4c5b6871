package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/doctor"
)

// A store whose schema was never created says so: every command exits 78
// with the migrate command that creates it, doctor reports it as a danger
// with the same fix, migrate creates it (and says so again on a second
// run, changing nothing), and then the commands work.
func TestMigrateMissingSchema(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) string // starts the store, returns its URL
	}{
		{"MariaDBLeaseTable", func(t *testing.T) string {
			return "mysql+table://root@" + testserver.MariaDB(t).Addr() + "/distlock?request_timeout=5s"
		}},
		{"DynamoDB", func(t *testing.T) string {
			for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_EC2_METADATA_DISABLED": "true"} {
				t.Setenv(k, v)
			}
			return "dynamodb://locks?region=us-east-1&endpoint=" + testserver.DynamoEndpoint(testserver.Dynalite(t))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.start(t)
			fix := "distlock migrate '" + u + "'"
			for _, args := range [][]string{{"status", "k"}, {"list"}, {"run", "--key", "k", "--", "true"}} {
				code, out, errOut := runMain(append([]string{"--backend", u}, args...)...)
				if code != ExitNoSchema || out != "" {
					t.Errorf("%q before migrate: exit %d, stdout %q; want %d (no schema) and nothing", args, code, out, ExitNoSchema)
				}
				oneLine(t, errOut, fix)
			}

			code, out, errOut := runMain("doctor", u, "-o", "json")
			if code != ExitDanger {
				t.Errorf("doctor before migrate: exit %d, want %d; stderr %q", code, ExitDanger, errOut)
			}
			var r doctor.Report
			decode(t, out, &r)
			named := false
			for _, f := range r.Findings {
				named = named || f.Severity == doctor.Danger && strings.Contains(f.Fix, fix)
			}
			if !named {
				t.Errorf("doctor reports no danger whose fix is %s:\n%s", fix, out)
			}

			for i := range 2 { // the second run finds the schema and changes nothing
				code, out, errOut := runMain("migrate", u)
				if code != ExitOK || errOut != "" || strings.Count(out, "\n") != 1 || !strings.Contains(out, u) {
					t.Fatalf("migrate #%d: exit %d, stdout %q, stderr %q; want 0 and one line naming the store", i+1, code, out, errOut)
				}
			}
			code, out, errOut = runMain("migrate", "--backend", u, "-o", "json")
			var res map[string]any
			decode(t, out, &res)
			if code != ExitOK || errOut != "" || res["url"] != u || res["schema"] == "" || res["schema"] == nil {
				t.Errorf("migrate -o json: exit %d, stderr %q, %v; want 0, the URL and the schema", code, errOut, res)
			}

			code, out, errOut = runMain("status", "k", "--backend", u)
			if code != ExitOK || out != "key:  k\nheld: no\n" {
				t.Errorf("status after migrate: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			code, out, errOut = runMain("doctor", u, "-o", "json")
			if code != ExitOK {
				t.Errorf("doctor after migrate: exit %d, stderr %q:\n%s", code, errOut, out)
			}
		})
	}
}

// A store without a schema has nothing to migrate: migrate says so, sends
// nothing, and exits 0.
func TestMigrateNoSchema(t *testing.T) {
	for u, says := range map[string]string{
		"mem://":                      "mem:// keeps no schema",
		"redis://127.0.0.1:1":         "redis:// keeps no schema",
		"etcd://127.0.0.1:1":          "etcd:// keeps no schema",
		"distlock://127.0.0.1:1":      "distlock:// keeps no schema",
		"zk://127.0.0.1:1":            "zk:// keeps no schema",
		"redlock://127.0.0.1:1":       "redlock:// keeps no schema",
		"redis-cluster://127.0.0.1:1": "redis-cluster:// keeps no schema",
	} {
		code, out, errOut := runMain("migrate", u)
		if code != ExitOK || errOut != "" || strings.Count(out, "\n") != 1 || !strings.Contains(out, says) {
			t.Errorf("migrate %s: exit %d, stdout %q, stderr %q; want 0 and one line saying %q", u, code, out, errOut, says)
		}
		code, out, _ = runMain("migrate", u, "-o", "json")
		var res map[string]any
		if err := json.Unmarshal([]byte(out), &res); err != nil || code != ExitOK || res["none"] == nil {
			t.Errorf("migrate %s -o json: exit %d, %q; want 0 and why there is none", u, code, out)
		}
	}
}

// Bad input is a usage error that sends nothing; a store that does not
// answer is 69.
func TestMigrateBadInput(t *testing.T) {
	t.Setenv("DISTLOCK_BACKEND", "")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"migrate"}, ExitUsage, "no store"},
		{[]string{"migrate", "a://", "b://"}, ExitUsage, "accepts at most 1 arg"},
		{[]string{"migrate", "foo://x"}, ExitUsage, `unknown scheme "foo"`},
		{[]string{"migrate", "%zz"}, ExitUsage, "invalid URL escape"},
		{[]string{"migrate", "mysql+table://root@127.0.0.1:1/db?colour=red"}, ExitUsage, "colour"},
		{[]string{"migrate", "mem://", "-o", "yaml"}, ExitUsage, `-o "yaml"`},
		{[]string{"migrate", "mysql+table://root@127.0.0.1:1/db?timeout=1s"}, ExitUnavailable, "refused"},
	} {
		code, out, errOut := runMain(c.args...)
		if code != c.code || out != "" {
			t.Errorf("%q: exit %d, stdout %q; want %d and nothing", c.args, code, out, c.code)
		}
		oneLine(t, errOut, c.want)
	}
}

func TestMigrateHelp(t *testing.T) {
	code, out, _ := runMain("migrate", "--help")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, w := range []string{"Exit codes", "exits 78", "Examples:", "distlock migrate 'mysql+table://",
		"Has a schema: dynamodb:// mysql:// mysql+table:// nats:// postgres://", "Keeps none (migrate says so and exits 0): distlock://"} {
		if !strings.Contains(out, w) {
			t.Errorf("help lacks %q:\n%s", w, out)
		}
	}
}

// PostgreSQL's advisory locks and MySQL's named locks create their tables
// on first use; migrate creates them ahead of it, twice without harm.
func TestMigrateFirstUseStores(t *testing.T) {
	for u, table := range map[string]string{
		testserver.PostgresDSN(testserver.Postgres(t)):                          "distlock_pg_locks",
		"mysql://root@" + testserver.MariaDB(t).Addr() + "/distlock?timeout=5s": "distlock_mysql_locks",
	} {
		for i := range 2 {
			code, out, errOut := runMain("migrate", u)
			if code != ExitOK || errOut != "" || !strings.Contains(out, table) {
				t.Errorf("migrate %s #%d: exit %d, stdout %q, stderr %q; want 0 naming %s", u, i+1, code, out, errOut, table)
			}
		}
	}
}
