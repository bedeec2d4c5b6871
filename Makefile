# make deps  installs the store servers the tests need (idempotent).
# make test  ensures deps, then checks formatting, vets, and runs every test
#            with the race detector against real servers, one package at a
#            time so that timing-sensitive fault tests do not starve each other
#            on small machines: the library's module, then the distlock
#            binary's own module (cmd/distlock, kept apart so that a program
#            importing one backend does not pull the CLI's dependencies).

GO ?= go

.PHONY: deps test fmt-check vet bench build

deps:
	./scripts/deps.sh

test: deps fmt-check vet
	$(GO) test -race -count=1 -p 1 -timeout 30m ./...
	cd cmd/distlock && $(GO) test -race -count=1 -p 1 -timeout 20m ./...

fmt-check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	cd cmd/distlock && $(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# make build  builds the distlock binary into bin/.
build:
	cd cmd/distlock && $(GO) build -o ../../bin/distlock .
