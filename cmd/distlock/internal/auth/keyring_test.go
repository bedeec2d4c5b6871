package auth_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/cmd/distlock/internal/auth"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	payToken   = "pay-client-0123456789abcdef"
	payViewer  = "pay-viewer-0123456789abcdef"
	opsToken   = "ops-admin--0123456789abcdef"
	validLines = "# token tenant role\n\n" +
		payToken + " payments client\n" +
		"  " + payViewer + "\tpayments\tviewer  \n" +
		"# a comment line\n" +
		opsToken + " ops admin\n"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadAndLookup(t *testing.T) {
	k, err := auth.Load(writeFile(t, validLines))
	if err != nil {
		t.Fatal(err)
	}
	if k.Len() != 3 {
		t.Errorf("Len = %d, want 3", k.Len())
	}
	credentials := map[string]bool{}
	for _, c := range []struct {
		token string
		want  auth.Identity
	}{
		{payToken, auth.Identity{Tenant: "payments", Role: auth.Client}},
		{payViewer, auth.Identity{Tenant: "payments", Role: auth.Viewer}},
		{opsToken, auth.Identity{Tenant: "ops", Role: auth.Admin}},
	} {
		got, ok := k.Lookup(c.token)
		if !ok || got.Tenant != c.want.Tenant || got.Role != c.want.Role {
			t.Errorf("Lookup(%s) = %+v, %v; want %+v, true", c.token[:8], got, ok, c.want)
		}
		if got.Credential == "" || strings.Contains(got.Credential, c.token) || credentials[got.Credential] {
			t.Errorf("Lookup(%s): credential %q is empty, shows the token, or is another token's", c.token[:8], got.Credential)
		}
		credentials[got.Credential] = true
	}
	for _, miss := range []string{"", payToken[:len(payToken)-1], payToken + "x", strings.ToUpper(payToken), "payments"} {
		if id, ok := k.Lookup(miss); ok {
			t.Errorf("Lookup(%q) = %+v, true; want a miss", miss, id)
		}
	}
	var nilRing *auth.Keyring
	if _, ok := nilRing.Lookup(payToken); ok {
		t.Error("a nil keyring found a token")
	}
}

// Every bad file fails naming the file and the line, and never shows a token.
func TestLoadErrors(t *testing.T) {
	secret := "s3cr3t-token-value-0123"
	for _, c := range []struct {
		name, content, want string
	}{
		{"two fields", "# x\n" + secret + " payments\n", ":2: 2 fields, want 3"},
		{"four fields", secret + " payments client extra\n", ":1: 4 fields, want 3"},
		{"short token", "short-token-15c payments client\n", ":1: the token has 15 characters, the minimum is 16"},
		{"bad tenant upper", secret + " Payments client\n", `:1: tenant "Payments" does not match`},
		{"bad tenant start", secret + " -pay client\n", `:1: tenant "-pay" does not match`},
		{"bad tenant long", secret + " " + strings.Repeat("a", 64) + " client\n", ":1: tenant"},
		{"bad role", secret + " payments root\n", `:1: auth: unknown role "root"`},
		{"duplicate", secret + " payments client\n\n" + secret + " ops admin\n", ":3: the token of line 1 again"},
		{"long line", strings.Repeat("x", 5000) + "\n", ":1: bufio.Scanner: token too long"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, c.content)
			_, err := auth.Load(path)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, path+c.want) {
				t.Errorf("error %q does not contain %q", msg, path+c.want)
			}
			if strings.Contains(msg, secret) || strings.Contains(msg, "short-token") {
				t.Errorf("error %q shows a token", msg)
			}
		})
	}
	if _, err := auth.Load(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Load of a missing file: %v, want an error naming it", err)
	}
}

func TestEmptyFile(t *testing.T) {
	k, err := auth.Load(writeFile(t, "# nobody yet\n"))
	if err != nil || k.Len() != 0 {
		t.Fatalf("Load = %v, %v; want an empty keyring", k, err)
	}
	if _, ok := k.Lookup(payToken); ok {
		t.Error("an empty keyring found a token")
	}
}

func TestRoles(t *testing.T) {
	want := map[auth.Role][]auth.Action{
		auth.Viewer:      {auth.Read},
		auth.Client:      {auth.Read, auth.Write},
		auth.TenantAdmin: {auth.Read, auth.Write, auth.Force},
		auth.Admin:       {auth.Read, auth.Write, auth.Force, auth.Administer},
		0:                nil,
	}
	for role, allowed := range want {
		for _, a := range []auth.Action{auth.Read, auth.Write, auth.Force, auth.Administer, 0} {
			in := false
			for _, b := range allowed {
				in = in || a == b
			}
			if role.Allows(a) != in {
				t.Errorf("%v.Allows(%v) = %v, want %v", role, a, !in, in)
			}
		}
	}
	for _, name := range []string{"viewer", "client", "tenant-admin", "admin"} {
		r, err := auth.ParseRole(name)
		if err != nil || r.String() != name {
			t.Errorf("ParseRole(%q) = %v, %v", name, r, err)
		}
	}
	if _, err := auth.ParseRole("Admin"); err == nil {
		t.Error(`ParseRole("Admin") succeeded; roles are lower case`)
	}
}

func TestValidTenant(t *testing.T) {
	for name, want := range map[string]bool{
		"a": true, "payments": true, "team-1_x": true, "0abc": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "_a": false, "A": false, "a.b": false, "a/b": false, strings.Repeat("a", 64): false,
	} {
		if got := auth.ValidTenant(name); got != want {
			t.Errorf("ValidTenant(%q) = %v, want %v", name, got, want)
		}
	}
}
