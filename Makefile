# One entry point for humans and CI. `make test` is what .ci/run calls.
GO        ?= go
BIN       ?= bin/acyclicfs
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/staticcheck)
PKGS      := ./...

.PHONY: all build demo test check fmt fmt-check vet staticcheck tidy-check unit race bench bench-fs clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/acyclicfs

# The main job end to end on the embedded default store (no server).
demo: build
	./scripts/demo.sh

# Everything CI checks: formatting, vet, staticcheck, go mod tidy, and every
# test (unit, property, mount, end-to-end through the binary) under -race.
test: fmt-check vet staticcheck tidy-check race

fmt:
	gofmt -w $$(git ls-files '*.go')

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(STATICCHECK) $(PKGS)

tidy-check:
	@cp go.mod /tmp/acyclicfs-go.mod.bak; cp go.sum /tmp/acyclicfs-go.sum.bak; \
	$(GO) mod tidy; \
	if ! git diff --quiet -- go.mod go.sum; then git diff -- go.mod go.sum; \
	  cp /tmp/acyclicfs-go.mod.bak go.mod; cp /tmp/acyclicfs-go.sum.bak go.sum; \
	  echo "go mod tidy changes go.mod/go.sum"; exit 1; fi

unit:
	$(GO) test $(PKGS)

race:
	$(GO) test -race -timeout 15m $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# Side by side against a native directory, go-fuse loopback and
# fuse-overlayfs (root; apt-get install fuse-overlayfs). Writes docs/benchmarks.md.
bench-fs:
	$(GO) run ./test/bench -runs 2 -profile

clean:
	rm -rf bin
