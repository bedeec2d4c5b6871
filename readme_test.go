package distlock_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeUsageIsTheExample keeps the README's usage example compiled and
// run: it must be, verbatim, the code between the markers in example_test.go.
func TestReadmeUsageIsTheExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok1 := strings.Cut(string(src), "// README usage begin\n")
	code, _, ok2 := strings.Cut(rest, "\n// README usage end")
	if !ok1 || !ok2 {
		t.Fatal("example_test.go lost its README usage markers")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), code) {
		t.Fatalf("README.md does not show the usage example of example_test.go verbatim:\n%s", code)
	}
}
