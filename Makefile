# make deps  installs the store servers the tests need (idempotent).
# make test  ensures deps, then checks formatting, vets, and runs every test
#            with the race detector against real servers (scripts/test.sh):
#            the library's module, the distlock binary's own module
#            (cmd/distlock, kept apart so that a program importing one
#            backend does not pull the CLI's dependencies), the service's Go
#            client, the short chaos run and the Python and TypeScript
#            clients, side by side; then it prints the slowest packages and
#            the time taken.

GO ?= go
# -trimpath: builds that do not depend on where the clone is, so that the
# build cache of one clone serves the next.
export GOFLAGS := $(strip -trimpath $(GOFLAGS))

.PHONY: deps test fuzz fmt-check vet bench build generate generate-check

deps:
	./scripts/deps.sh

test: deps fmt-check generate-check vet
	GO=$(GO) ./scripts/test.sh

# make chaos  runs every backend under every fault that applies to it (client
#             processes paused, links cut, stores killed, failed over, store
#             clocks stepped or made fast or slow, etcd members added and
#             removed) and prints the table of docs/guarantees.md:
#             operations, overlaps at the resource, stale writes rejected
#             and accepted, fence regressions, late loss notices. A scenario
#             that breaks what its backend promises fails. About 16 minutes
#             on 2 cores.
.PHONY: chaos
chaos: deps
	@out=$${TMPDIR:-/tmp}/distlock-chaos.md; \
	$(GO) test -tags chaos -race -count=1 -timeout 40m -run '^TestChaos$$' ./internal/chaos/ -args -chaos.table=$$out; \
	status=$$?; cat $$out; exit $$status

# make fuzz  fuzzes the service's request decoding and validation for 5
#            minutes; make test runs the fuzz target's seed corpus only.
fuzz:
	cd cmd/distlock && $(GO) test -run '^$$' -fuzz '^FuzzAcquireRequest$$' -fuzztime 5m ./internal/server

fmt-check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags chaos . ./internal/chaos/
	cd gen && $(GO) vet ./...
	cd cmd/distlock && $(GO) vet ./...
	cd backend/remotelock && $(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# make generate  regenerates gen/ from proto/ with the generators pinned as
#                tools in cmd/distlock/go.mod (buf, protoc-gen-go,
#                protoc-gen-connect-go), after linting the protos; then the
#                TypeScript client's clients/node/src/gen/ with the same buf
#                and the protoc-gen-es of clients/node/package-lock.json.
generate:
	cd cmd/distlock && GOBIN=$(CURDIR)/bin/tools $(GO) install tool
	PATH="$(CURDIR)/bin/tools:$$PATH" bin/tools/buf lint
	rm -rf gen/distlock
	PATH="$(CURDIR)/bin/tools:$$PATH" bin/tools/buf generate
	./scripts/proto-sum.sh >gen/proto.sum
	cd clients/node && npm ci --no-audit --no-fund --loglevel=error && $(CURDIR)/bin/tools/buf generate

# generate-check fails if the committed gen/ differs from what generate makes.
# It regenerates only when gen/proto.sum, the checksum of the protos, the
# generators' versions and gen/ that generate recorded, no longer matches.
generate-check:
	@if [ "$$(./scripts/proto-sum.sh)" = "$$(cat gen/proto.sum 2>/dev/null)" ]; then \
		echo "gen/ is what make generate made of proto/ (gen/proto.sum matches)"; \
	else \
		$(MAKE) --no-print-directory generate && \
		out="$$(git status --porcelain -- gen)"; if [ -n "$$out" ]; then echo "gen/ is not what make generate makes; run make generate and commit:"; echo "$$out"; git diff --stat -- gen; exit 1; fi; \
	fi

# make build  builds the distlock binary into bin/.
build:
	cd cmd/distlock && $(GO) build -o ../../bin/distlock .
