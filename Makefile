# One entry point for humans and CI. `make test` is what .ci/run calls.
GO        ?= go
BIN       ?= bin/acyclicfs
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/staticcheck)
PKGS      := ./...

.PHONY: all build demo test weed check fmt fmt-check vet staticcheck tidy-check unit race race-devfuse bench bench-profile bench-attribution bench-fs bench-deps bench-micro clean

all: build

# CGO_ENABLED=0: a static binary starts about 1.5 ms sooner (no dynamic
# loader), and every CLI call, every `exec` of an agent's tool, pays it.
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/acyclicfs
	CGO_ENABLED=0 $(GO) build -o $(dir $(BIN))acyclicfs-fsmonitor ./cmd/acyclicfs-fsmonitor

# The main job end to end on the embedded default store (no server).
demo: build
	./scripts/demo.sh

# Everything CI checks: formatting, vet, staticcheck, go mod tidy, and every
# test (unit, property, mount, end-to-end through the binary) under -race.
test: fmt-check vet staticcheck tidy-check weed race race-devfuse

# SeaweedFS's weed binary, the real S3 server of the object-storage tests
# (internal/weedtest), built once per machine into a cache outside the
# repository (about 5 minutes the first time; reused after). make test
# then requires it: ACYCLICFS_REQUIRE_WEED=1 turns those tests' skip into
# a failure.
weed:
	scripts/build-weed.sh >/dev/null

fmt:
	gofmt -w $$(git ls-files '*.go')

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(STATICCHECK) $(PKGS)

# Leaves nothing behind: the backups live in a directory removed on exit.
tidy-check:
	@bak=$$(mktemp -d); trap 'rm -rf "$$bak"' EXIT; \
	cp go.mod go.sum "$$bak"/; \
	$(GO) mod tidy; \
	if ! git diff --quiet -- go.mod go.sum; then git diff -- go.mod go.sum; \
	  cp "$$bak"/go.mod "$$bak"/go.sum .; \
	  echo "go mod tidy changes go.mod/go.sum"; exit 1; fi

unit:
	$(GO) test $(PKGS)

# -count=1: the end-to-end tests drive a binary they build themselves,
# which go test's result cache cannot see.
# The fuse module's enable_uring is on during the run where root may turn
# it on (it only lets servers that ask for io_uring have it), so that mounts
# take their default transport, io_uring, as on a machine set up for speed;
# scripts/with-uring.sh puts it back as it was afterwards.
race:
	ACYCLICFS_REQUIRE_WEED=1 scripts/with-uring.sh $(GO) test -race -count=1 -timeout 15m $(PKGS)

# The tool and window tests once more with every mount served through
# read and write on /dev/fuse (mount --transport dev-fuse), the transport
# where the kernel does not offer io_uring. About 15 s.
race-devfuse:
	ACYCLICFS_TEST_TRANSPORT=dev-fuse $(GO) test -race -count=1 -timeout 10m -run 'TestTool|TestWindow' ./test/

# Every system's files on a fresh journaled ext4 (a loop-mounted sparse
# image under $TMPDIR, deleted afterwards), not on whatever the host's root
# file system is: BENCH_FS= runs in a plain directory under $TMPDIR.
BENCH_FS ?= -fresh-fs 32G

# Side by side against a native directory, go-fuse loopback,
# fuse-overlayfs, libfuse's passthrough_hp and the floor (test/bench/floorfs,
# an in-memory server with acyclicfs's kernel options and transports):
# every system in 2 runs (cp -a / git worktree in the fork
# table once). 11.8 minutes on this 2-core VM with a load average of 2.
# Then the cluster group (test/bench/cluster.go): an etcd embedded in the
# harness, two nodes sharing a blob directory against a local store, 9 runs,
# about a minute (-no-cluster skips it; -only-cluster runs it alone).
# Writes docs/benchmarks.md and docs/benchmarks.png.
bench: bench-deps
	scripts/with-uring.sh $(GO) run ./test/bench -runs 2 $(BENCH_FS)

# bench and a census of FUSE requests per workload, by opcode (acyclicfs
# mounted with --debug, the floor with -debug): a few minutes more. make
# bench carries the last census over.
bench-profile: bench-deps
	scripts/with-uring.sh $(GO) run ./test/bench -runs 2 -profile -profile-systems acyclicfs,floor $(BENCH_FS)

bench-fs: bench

# Write attribution on vs off (issue #29): acyclicfs and acyclicfs-noattr
# (mount --no-attribution) in 6 runs, each first in 3, for untar,
# create+unlink and git add+commit; prints the report (docs/benchmarks.md
# "Write attribution: hot-path cost" keeps the numbers). ~16 minutes here.
bench-attribution:
	scripts/with-uring.sh $(GO) run ./test/bench -runs 6 -systems native,acyclicfs,acyclicfs-noattr \
	  -workloads untar,create-unlink,git-commit -no-forks -no-land -no-inplace -no-fsmonitor -out '' -png ''

# What the harness runs besides Go: fuse-overlayfs and git, from Debian's
# packages when root and missing (otherwise the harness skips what is absent);
# libfuse's passthrough_hp, built into bin/ from Debian's fuse3 source
# package (scripts/passthrough-hp.sh; skipped when that fails). bench runs
# under scripts/with-uring.sh, so that acyclicfs mounts take their default
# transport, io_uring, and the machine's setting is put back afterwards.
bench-deps:
	@need=""; for t in fuse-overlayfs git; do command -v $$t >/dev/null 2>&1 || need="$$need $$t"; done; \
	if [ -n "$$need" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "bench: installing$$need"; DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need >/dev/null; \
	  else echo "bench: missing$$need (the harness skips what needs it)"; fi; \
	fi
	@if [ "$$(id -u)" = 0 ] && [ ! -x bin/passthrough_hp ]; then \
	  scripts/passthrough-hp.sh bin/passthrough_hp || echo "bench: no passthrough_hp (the harness skips it)"; fi

# The Go micro-benchmarks (testing.B) of every package.
bench-micro:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

clean:
	rm -rf bin
