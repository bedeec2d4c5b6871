package testserver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// dynaliteCLI is where `npm ci` at the repository root (scripts/deps.sh)
// puts dynalite's command, relative to the root.
var dynaliteCLI = filepath.Join("node_modules", "dynalite", "cli.js")

// Dynalite starts dynalite, a DynamoDB-compatible server that keeps its
// tables in memory (a restart empties it). A new table is ACTIVE on the
// server's next turn after CreateTable returns (it starts with
// --createTableMs 0), so wait for ACTIVE as with DynamoDB
// (dynamolock.CreateTable does). Its endpoint is DynamoEndpoint(s); it
// accepts any credentials.
func Dynalite(t testing.TB) *Server {
	t.Helper()
	node := lookBinary(t, "nodejs", "node")
	cli := findDynalite(t)
	s := &Server{Name: "dynalite", Port: FreePort(t), Dir: tempDir(t, "dyn")}
	quoted, _ := json.Marshal(cli)
	s.command = func() *exec.Cmd {
		return exec.Command(node, "-e", fmt.Sprintf(survivesAbortedRequests, quoted), "--",
			"--host", Host, "--port", strconv.Itoa(s.Port),
			"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
	}
	s.ready = func(ctx context.Context) error {
		return exchange(ctx, s.Addr(), []byte("GET / HTTP/1.0\r\n\r\n"), []byte(" 200 OK"))
	}
	return newServer(t, s)
}

// survivesAbortedRequests runs the dynalite cli.js whose quoted path fills
// its %s, with the arguments given after it, but keeps the server up when a client abandons a
// request while sending it, as an SDK does when a context ends: dynalite
// rethrows that error from the request's handler, which ends the process.
// Any other uncaught error still ends it.
const survivesAbortedRequests = `
process.on('uncaughtException', (err) => {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') return
  console.error(err)
  process.exit(1)
})
const cli = %s
process.argv.splice(1, 0, cli)
require(cli)
`

// DynamoEndpoint returns the base URL of s for an SDK client.
func DynamoEndpoint(s *Server) string { return "http://" + s.Addr() }

// findDynalite returns the path of dynalite's cli.js in the nearest
// directory, from the working directory up, that has it, or fails (skips
// under -short) saying how to install it.
func findDynalite(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	for {
		p := filepath.Join(dir, dynaliteCLI)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		up := filepath.Dir(dir)
		if up == dir {
			break
		}
		dir = up
	}
	msg := "testserver: " + dynaliteCLI + " not found in this directory or above; install it with `make deps` " +
		"(or `npm ci` at the repository root, with Debian's nodejs and npm: `sudo apt-get install -y nodejs npm`)"
	if testing.Short() {
		t.Skip(msg)
	}
	t.Fatal(msg)
	return ""
}
