#!/usr/bin/env bash
# Runs the worked example of docs/clients.md in each language against one
# real distlock serve (the binary $DISTLOCK_BIN names, on a free loopback
# port, over its embedded store): Go (backend/remotelock/examples/charge),
# Python (clients/python/examples/charge.py), TypeScript
# (clients/node/examples/charge.ts, built by the node client's npm test) and
# curl (examples/charge/charge.sh). Each must print the four lines of the
# story with fences that rise, and docs/clients.md must show each file
# verbatim. make test runs it (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${DISTLOCK_BIN:?DISTLOCK_BIN must name a distlock binary: (cd cmd/distlock && go build -o /tmp/distlock .)}"
GO=${GO:-go}
PYTHON=${PYTHON:-/usr/bin/python3}

dir=$(mktemp -d)
serve_pid=
cleanup() {
	[ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT

client=example-client-token-0001
admin=example-admin-token-00001
printf '%s alpha client\n%s alpha admin\n' "$client" "$admin" >"$dir/tokens"
chmod 600 "$dir/tokens"
"$DISTLOCK_BIN" serve --listen 127.0.0.1:0 --tokens "$dir/tokens" --data-dir "$dir/data" -o json >"$dir/serve.out" 2>"$dir/serve.err" &
serve_pid=$!
for _ in $(seq 100); do # the first JSON object it prints says where it listens
	url=$(sed -n 's/^  "url": "\(http[^"]*\)".*/\1/p' "$dir/serve.out" | head -1)
	[ -n "$url" ] && break
	sleep 0.1
done
[ -n "${url:-}" ] || { echo "serve did not start:"; cat "$dir/serve.err"; exit 1; }
export DISTLOCK_URL=$url DISTLOCK_TOKEN=$client DISTLOCK_ADMIN_TOKEN=$admin

# check name: the output of one run tells the story, with rising fences.
check() {
	local name=$1 out=$2
	if ! awk '
		NR == 1 && /^A holds orders\/42 with fence [0-9]+$/ { a = $NF; next }
		NR == 2 && /^B holds orders\/42 with fence [0-9]+$/ { b = $NF; next }
		NR == 3 && $0 == "B charged order 42 (fence " b ")" { next }
		NR == 4 && $0 == "A refused: fence " a " is older than " b { ok = a + 0 < b + 0; next }
		{ ok = 0; exit }
		END { exit !(ok && NR == 4) }' <<<"$out"; then
		echo "$name: the example did not tell the story:"
		echo "$out"
		return 1
	fi
	echo "$name: ok ($(tr '\n' ' ' <<<"$out"| sed 's/ $//'))"
}

status=0
run() { # name command...: runs one version under a time bound and checks it
	local name=$1 out
	shift
	if ! out=$(timeout 120 "$@" 2>&1); then
		echo "$name: failed:"
		echo "$out"
		status=1
		return
	fi
	check "$name" "$out" || status=1
}
run go bash -c "cd backend/remotelock && '$GO' run ./examples/charge"
run python env PYTHONPATH=clients/python PYTHONDONTWRITEBYTECODE=1 "$PYTHON" clients/python/examples/charge.py
run typescript node clients/node/dist/examples/charge.js
run curl examples/charge/charge.sh

for f in backend/remotelock/examples/charge/main.go clients/python/examples/charge.py \
	clients/node/examples/charge.ts examples/charge/charge.sh; do
	if ! "$PYTHON" -c 'import sys; sys.exit(open(sys.argv[1]).read() not in open("docs/clients.md").read())' "$f"; then
		echo "docs/clients.md does not show $f verbatim"
		status=1
	fi
done
exit $status
