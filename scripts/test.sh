#!/usr/bin/env bash
# Runs every test of the repository with the race detector against real
# servers: the library's module, the distlock binary's module
# (cmd/distlock), the service's Go client (backend/remotelock), the short
# form of the chaos run, the Python client (clients/python, with Debian's
# python3 and pytest) and the TypeScript client (clients/node: npm ci, then
# tsc and node --test), both clients against real distlock serves of one
# binary built for them, and, once the TypeScript client is built, the
# worked example of docs/clients.md in Go, Python, TypeScript and curl
# (examples/charge/run.sh). Everything runs side by side, two packages of
# each Go module at a time (see late, below): most of the suite's time is
# spent waiting for leases to run out and stores to answer, not on the
# CPU, and the timing tests hold only what a loaded machine keeps (a try
# that got a key held under a short lease fails only if it returned before
# the lease ended; a wake is compared with the store's own round trip). go test does not vet
# again (make test's vet target has), and builds with -trimpath (GOFLAGS,
# from the Makefile), so that a second clone reuses the build cache of the
# first. Every Go process of the run (tests, the servers they start, etcd)
# collects garbage at GOGC=400 unless GOGC is set: memory for CPU, a third
# less CPU for the cli package's race-built serves. Each module's output is
# printed whole once it ends, then the slowest packages and the time taken.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export GOGC=${GOGC:-400}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
start=$(date +%s)

took() { # name: records that the job name ended now
	echo $(($(date +%s) - start)) >"$logs/$1.took"
}
run() { # name dir args...
	local name=$1 dir=$2
	shift 2
	(cd "$dir" && "$GO" test -race -vet=off -count=1 "$@") >"$logs/$name.log" 2>&1
	echo $? >"$logs/$name.rc"
	took "$name"
}

# Two packages of the library and two of cmd/distlock run at once. The
# cmd module's end well before the library's, so these library packages
# wait for it, and four packages run at once throughout instead of two
# in the last minutes. Every other package of the library runs from the
# start.
late=(backend/zklock backend/natslock backend/mysqllock internal/testserver)
module=$("$GO" list -m)
early=$("$GO" list ./... | grep -vxF "$(printf "$module/%s\n" "${late[@]}")")
if [ -z "$module" ] || [ -z "$early" ]; then
	echo "go list found no packages" >&2
	exit 1
fi
run library . -p 2 -timeout 30m $early &
{
	run cmd cmd/distlock -p 2 -timeout 20m ./...
	run library-late . -p 2 -timeout 20m "${late[@]/#/./}"
} &
run remotelock backend/remotelock -p 1 -timeout 5m ./... &
run chaos . -tags chaos -short -timeout 5m ./internal/chaos/ &
python() { # the Python client's tests
	cd clients/python && DISTLOCK_BIN="$logs/distlock" PYTHONDONTWRITEBYTECODE=1 \
		timeout 600 "${PYTHON:-/usr/bin/python3}" -m pytest -q -p no:cacheprovider
}
node_client() { # the TypeScript client's tests: npm ci, then tsc and node --test
	cd clients/node && timeout 600 npm ci --no-audit --no-fund --loglevel=error &&
		DISTLOCK_BIN="$logs/distlock" timeout 600 npm test
}
examples() { # the worked example of docs/clients.md in each language (the TypeScript one built by node_client)
	DISTLOCK_BIN="$logs/distlock" timeout 300 examples/charge/run.sh
}
client() { # name function: one client's tests, logged as name
	("$2") >"$logs/$1.log" 2>&1
	echo $? >"$logs/$1.rc"
	took "$1"
}
clients() { # the clients' tests side by side, against a distlock binary built for them
	if ! (cd cmd/distlock && "$GO" build -o "$logs/distlock" .) >"$logs/build.log" 2>&1; then
		for name in python node examples; do
			cp "$logs/build.log" "$logs/$name.log"
			echo 1 >"$logs/$name.rc"
		done
		return
	fi
	client python python &
	{
		client node node_client
		client examples examples
	} &
	wait
}
clients &
wait

status=0
for name in library cmd library-late remotelock chaos python node examples; do
	echo "=== $name (ended after $(cat "$logs/$name.took" 2>/dev/null || echo ?)s)"
	cat "$logs/$name.log"
	[ "$(cat "$logs/$name.rc")" = 0 ] || status=1
done
echo "=== slowest packages"
cat "$logs"/*.log | awk -F'\t' '$1 ~ /^(ok|FAIL)/ {print $3 "\t" $2}' | sort -rn | head -10
echo "=== all tests took $(($(date +%s) - start))s; $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
