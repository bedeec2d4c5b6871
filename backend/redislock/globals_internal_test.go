package redislock

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// redisGlobals are the globals Redis gives a script (Lua 5.1's base
// functions and libraries it keeps, and its own).
var redisGlobals = []string{
	"redis", "KEYS", "ARGV", "cjson", "cmsgpack", "struct", "bit",
	"string", "table", "math", "tonumber", "tostring", "type", "ipairs", "pairs",
	"next", "select", "unpack", "error", "assert", "pcall", "rawget", "rawset", "rawequal",
}

// globalAccess matches luac's listing of a global read or write, naming it.
var globalAccess = regexp.MustCompile(`(?m)\t([GS]ETGLOBAL)\t.*; (\S+)$`)

// TestScriptsUseNoOtherGlobals compiles every script as the server receives
// it and refuses a read of a global that Redis does not give, or any write
// of one: Redis 7 stops such a script where it meets it, after writes it
// cannot undo, so a local used out of its scope frees a key and then fails.
func TestScriptsUseNoOtherGlobals(t *testing.T) {
	luac, err := exec.LookPath("luac5.1")
	if err != nil {
		t.Fatal("luac5.1 (Lua 5.1, as Redis runs) not found; install it with `sudo apt-get install -y lua5.1` or `make deps`")
	}
	sources := map[string]string{}
	for i, src := range scriptSources {
		sources[fmt.Sprintf("lock script %d", i)] = src
	}
	for i, src := range semScriptSources {
		sources[fmt.Sprintf("semaphore script %d", i)] = src
	}
	dir := t.TempDir()
	for name, src := range sources {
		file := filepath.Join(dir, "script.lua")
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(luac, "-p", "-l", file).CombinedOutput()
		if err != nil {
			t.Fatalf("%s does not compile: %v\n%s", name, err, out)
		}
		for _, m := range globalAccess.FindAllStringSubmatch(string(out), -1) {
			if m[1] == "SETGLOBAL" || !slices.Contains(redisGlobals, m[2]) {
				t.Errorf("%s: %s %s", name, m[1], m[2])
			}
		}
	}
}
