#!/usr/bin/env bash
# Installs the store servers the tests start, the headless browser the
# dashboard's tests drive, Lua 5.1's compiler, with which a test checks
# the Redis scripts, pytest for the Python client, Node.js for the
# TypeScript client, curl for the curl example, and libfaketime with a C
# compiler for the chaos suite's clock faults (Debian/Ubuntu), skipping
# what is already present;
# then dynalite, the DynamoDB-compatible server, from npm at the version
# package-lock.json pins, into node_modules at the repository root; and
# nats-server, built from the server's Go module at the version pinned
# below, into bin/tools. Safe to run again.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -e "$1" ]; }
want() { have "$1" || need+=("$2"); }

want redis-server redis-server
want redis-cli redis-tools
want etcd etcd-server
want etcdctl etcd-client
want /usr/share/java/zookeeper.jar zookeeper
want java default-jre-headless
want mariadbd mariadb-server
want mariadb mariadb-client
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
want setpriv util-linux
want chromium chromium
want /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf fonts-dejavu-core
want luac5.1 lua5.1
want node nodejs
want npm npm
# The worked example of docs/clients.md runs its curl version too.
want curl curl
# Clock faults run a store under libfaketime (internal/testserver's
# FakeClock), with a small preload built by the C compiler, which the race
# detector needs too.
ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || need+=(libfaketime)
want cc gcc
# The Python client's tests run on Debian's python3 with its pytest.
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || need+=(python3-pytest)

if [ ${#need[@]} -eq 0 ]; then
	echo "deps: all store servers and the browser present"
else
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
	echo "deps: installing ${need[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -e "$root/node_modules/dynalite/cli.js" ]; then
	echo "deps: dynalite present"
else
	echo "deps: installing dynalite (npm ci)"
	(cd "$root" && npm ci --no-audit --no-fund --loglevel=error)
fi

# nats-server for backend/natslock's tests, from its Go module (Debian has
# no package of it).
nats_server=github.com/nats-io/nats-server/v2@v2.15.3
if [ -x "$root/bin/tools/nats-server" ] && "$root/bin/tools/nats-server" --version | grep -q "${nats_server##*@v}"; then
	echo "deps: nats-server present"
else
	echo "deps: building $nats_server into bin/tools"
	(cd "$root" && GOBIN="$root/bin/tools" "${GO:-go}" install "$nats_server")
fi
