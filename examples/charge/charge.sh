#!/usr/bin/env bash
# Two replicas race to charge one order; the fence refuses the stale write.
# The worked example of docs/clients.md, with curl over Connect's JSON
# protocol. It reads the service's URL and two tokens from DISTLOCK_URL,
# DISTLOCK_TOKEN (a client's) and DISTLOCK_ADMIN_TOKEN (an admin's, for the
# operator's forced release).
set -euo pipefail

call() { # token method json: one LockService call; fails on an error answer
	curl -sS --fail-with-body --max-time 10 -H 'Content-Type: application/json' \
		-H "Authorization: Bearer $1" -d "$3" "$DISTLOCK_URL/distlock.v1.LockService/$2"
}
fence() { sed -n 's/.*"fence":"\([0-9]*\)".*/\1/p'; }

# The payment store's stand-in: the highest fence it accepted for order 42.
ledger_fence=0
charge() { # fence: refused if a newer holder already charged
	if [ "$1" -lt "$ledger_fence" ]; then
		echo "fence $1 is older than $ledger_fence"
		return 1
	fi
	ledger_fence=$1
}

a=$(call "$DISTLOCK_TOKEN" Acquire '{"key":"orders/42","lease":"10s","owner":"replica-a"}' | fence)
echo "A holds orders/42 with fence $a"

# A stalls; an operator clears what looks like a stuck job.
call "$DISTLOCK_ADMIN_TOKEN" ForceRelease '{"key":"orders/42","reason":"replica-a looks stuck"}' >/dev/null

b_grant=$(call "$DISTLOCK_TOKEN" Acquire '{"key":"orders/42","lease":"10s","wait":"5s","owner":"replica-b"}')
b=$(fence <<<"$b_grant")
b_token=$(sed -n 's/.*"token":"\([^"]*\)".*/\1/p' <<<"$b_grant")
echo "B holds orders/42 with fence $b"
charge "$b"
echo "B charged order 42 (fence $b)"

# A wakes and charges as if it still held the lock.
if refused=$(charge "$a"); then
	echo "A's stale charge was accepted" >&2
	exit 1
fi
echo "A refused: $refused"
call "$DISTLOCK_TOKEN" Release "{\"key\":\"orders/42\",\"token\":\"$b_token\"}" >/dev/null
