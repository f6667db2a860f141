# iwarpd — small Makefile; every target is documented in README.md.
GO       ?= go
BIN      ?= bin
FUZZTIME ?= 10s
BENCHTIME ?= 200ms
TESTFLAGS ?=

.PHONY: build run test race fuzz lint bench bench-deps clean deps build-deps c c-asan c-tsan install fabtests

build: build-deps
	$(GO) build -o $(BIN)/ ./cmd/...
	@$(MAKE) --no-print-directory c

# The C parts (c/Makefile, docs/c-client.md): libiwverbs (the C client
# core), the libfabric provider and the C test programs, -Wall -Wextra
# -Werror. Skipped with a message when the build dependencies are missing
# and cannot be installed (not root).
c:
	@if ! command -v cc >/dev/null 2>&1 || ! pkg-config --exists jansson 2>/dev/null; then \
		echo "C parts skipped: gcc, pkg-config or libjansson-dev missing; run scripts/install-build-deps.sh as root"; \
	elif [ ! -f /usr/include/rdma/fabric.h ]; then \
		echo "libfabric provider skipped: libfabric-dev missing; run scripts/install-build-deps.sh as root"; \
		$(MAKE) --no-print-directory -C c core tests; \
	else \
		$(MAKE) --no-print-directory -C c; \
	fi

# The same with AddressSanitizer and UBSan, in c/build-asan (test/cclient
# builds its own sanitized copy).
c-asan:
	$(MAKE) -C c asan

# core + tests with ThreadSanitizer, in c/build-tsan (test/cclient builds
# its own copy and runs the multi-threaded tests under it).
c-tsan:
	$(MAKE) -C c tsan

# gcc, make, pkg-config, libjansson-dev, libfabric-dev (idempotent).
build-deps:
	./scripts/install-build-deps.sh

# Installs the programs into $(DESTDIR)$(PREFIX)/bin and the libfabric
# provider libiwarpd-fi.so into Debian's libfabric provider directory
# (found without FI_PROVIDER_PATH), saying what it replaced; with PREFIX
# given (make install PREFIX=$$HOME/iwarpd) the provider goes to
# $(PREFIX)/lib/libfabric instead, for FI_PROVIDER_PATH (docs/libfabric.md
# "Installing the provider").
PROVPREFIX := $(if $(filter command line environment,$(origin PREFIX)),PREFIX=$(PREFIX))
PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/* $(DESTDIR)$(PREFIX)/bin/
	$(MAKE) -C c install $(PROVPREFIX)

# libfabric's conformance suite, fabtests v1.17.0 (../shared/conformance),
# against this checkout's provider and the reference providers tcp and
# udp;ofi_rxd in one run (docs/libfabric.md "fabtests"): built once into
# build/fabtests, then cmd/fabtests-run with FABTESTSFLAGS (e.g.
# FABTESTSFLAGS="-configs 'native RDM' -run fi_rdm -v").
FABTESTSFLAGS ?=
fabtests: build
	$(GO) build -o $(BIN)/ ./cmd/fabtests-run
	./$(BIN)/fabtests-run $(FABTESTSFLAGS)

# Runs the daemon on its embedded defaults (foreground; Ctrl-C stops it).
run: build
	./$(BIN)/iwarpd

deps:
	./scripts/install-test-deps.sh

# The whole test suite, as CI runs it (.ci/run): installs tshark/iproute2 when
# missing, checks formatting and vet, then every test with the race detector.
test: deps build-deps lint
	$(GO) test -race -count=1 -timeout 12m $(TESTFLAGS) ./...

# The suite without the test dependencies step, race detector on.
race:
	$(GO) test -race -count=1 -timeout 12m $(TESTFLAGS) ./...

# Every native fuzz target for FUZZTIME each (make fuzz FUZZTIME=10m for a
# longer run). `make test` already runs each target on its seed corpus.
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# gofmt, go vet and staticcheck (installed by scripts/install-lint-deps.sh,
# pinned; its checks are staticcheck's defaults).
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@sc=$$(GO=$(GO) ./scripts/install-lint-deps.sh | tail -n 1) && echo "staticcheck ./..." && $$sc ./...

# Go benchmarks of the wire layers; each prints beside its baseline
# (raw CRC32c) measured in the same run. Then the benchmark suite
# (docs/benchmarks.md): size sweeps of latency and bandwidth, bidirectional
# bandwidth, RD under loss, multi-QP scaling (1..64 QPs), idle cost and
# memory per peer, through two daemons on loopback and in two veth-joined
# namespaces, as ratios to raw sockets measured in the same run, written to
# BENCH_OUT (CSV, PNG, summary.md); at most 15 minutes here. BENCHFLAGS
# passes it flags (BENCHFLAGS=-quick: the CI smoke version, seconds;
# BENCHFLAGS="-only ud_lat -profile DIR": daemon CPU profiles, see
# docs/benchmarks.md "Where the time goes").
BENCHFLAGS ?=
BENCH_OUT ?= bench-results
bench: build bench-deps
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./internal/crc32c/ ./mpa/ ./ddp/ ./llp/...
	./$(BIN)/iwarp-bench -bin $(BIN) -out $(BENCH_OUT) $(BENCHFLAGS)

# What iwarp-bench can use beyond the project: fi_pingpong (libfabric-bin)
# and iproute2; never fails (the benchmark skips what is missing).
bench-deps:
	./scripts/install-bench-deps.sh

clean:
	rm -rf $(BIN)
	$(MAKE) -C c clean

# Linux SoftiWARP (siw) peer for interoperability tests: a qemu guest with
# Debian's 6.1 kernel, siw.ko built from linux-source-6.1 and rdma-core's
# rping (docs/siw-interop.md). Needs root; about 3 minutes the first time,
# cached in /var/cache/iwarpd-siw-vm (IWARPD_SIW_VM_CACHE), seconds after.
.PHONY: siw-vm interop interop-soak
siw-vm:
	./scripts/siw-vm/build.sh

# Interoperability tests that boot the siw guest (IWARPD_SIW_VM=1 enables
# them; without it they skip). INTEROP_PKGS lists the packages to run; add the
# RC interop tests there. IWARPD_SIW_VM_KEEP=dir keeps the captured pcaps.
INTEROP_PKGS ?= ./test/siwvm/...
interop: siw-vm
	IWARPD_SIW_VM=1 $(GO) test -count=1 -timeout 30m $(TESTFLAGS) $(INTEROP_PKGS)

# Soak mode of the interop tests (docs/siw-interop.md "Soak"): every
# configuration SOAK times, rping sizes 64 B..64 KiB, both roles, with
# SOAK_LOAD busy processes loading the host; failures keep their captures in
# SOAK_KEEP (default bench-results/siw-soak).
SOAK ?= 5
SOAK_LOAD ?= 2
SOAK_KEEP ?= $(CURDIR)/bench-results/siw-soak
interop-soak: siw-vm
	mkdir -p $(SOAK_KEEP)
	IWARPD_SIW_VM=1 IWARPD_SIW_SOAK=$(SOAK) IWARPD_SIW_SOAK_LOAD=$(SOAK_LOAD) IWARPD_SIW_VM_KEEP=$(SOAK_KEEP) \
	$(GO) test -count=1 -v -timeout 240m -run TestIwarpdSiwSoak $(TESTFLAGS) ./test/siwvm/
