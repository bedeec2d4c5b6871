# make deps  installs the store servers the tests need (idempotent).
# make test  ensures deps, then checks formatting, vets, and runs every test
#            with the race detector against real servers, one package at a
#            time so that timing-sensitive fault tests do not starve each other
#            on small machines.

GO ?= go

.PHONY: deps test fmt-check vet bench

deps:
	./scripts/deps.sh

test: deps fmt-check vet
	$(GO) test -race -count=1 -p 1 -timeout 30m ./...

fmt-check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
