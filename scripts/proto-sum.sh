#!/usr/bin/env bash
# Prints one checksum over everything gen/ is made from and gen/ itself:
# the protos, buf's configuration, the generators' versions pinned in
# cmd/distlock/go.mod, and the generated code. make generate records it in
# gen/proto.sum; make generate-check regenerates only when it differs.
set -euo pipefail
cd "$(dirname "$0")/.."
{
	find proto gen/distlock -type f | LC_ALL=C sort | xargs sha256sum
	sha256sum buf.yaml buf.gen.yaml
	grep -E '^[[:space:]]*(tool[[:space:]]|github\.com/bufbuild/buf |google\.golang\.org/protobuf |connectrpc\.com/connect )' cmd/distlock/go.mod
} | sha256sum | cut -d' ' -f1
