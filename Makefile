# weft: the two README commands are `make bench` and `make test`.
# Both install what is missing (Debian packages only) and build offline.

SHELL := /bin/bash

# cabal keeps its state inside the checkout and reads the repository-less
# config kept here, so a build never reaches for Hackage.
CABAL_HOME := $(CURDIR)/.cabal-home
GHCS_CACHE ?= /var/cache/weft-ghcs
CABAL := env CABAL_DIR=$(CABAL_HOME) cabal --config-file=$(CURDIR)/cabal.config

DEB_PACKAGES := ghc cabal-install libghc-hspec-dev libghc-quickcheck2-dev \
                libghc-primitive-dev libghc-async-dev \
                libghc-network-dev gcc make wrk nginx-light gnuplot-nox \
                redis-server redis-tools iproute2 util-linux \
                libghc-warp-dev libghc-wai-dev libghc-http-types-dev \
                libghc-streaming-commons-dev nghttp2-client curl \
                liburing-dev tcl time
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

BIN = $(CURDIR)/dist-newstyle/bin
EXES := weft-test weft-bench weft-simple-server weft-echo weft-echo-nonthreaded weft-pong weft-sws weft-kv \
        weft-fwd weft-pktgen weft-pktcheck weft-warp-test weft-warp-pong

.PHONY: all deps build test bench docs clean portable sdist-check redis-suite test-ghcs ghc-build ghc-test bench-ghc910 ghc-bench

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "weft: installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y --no-install-recommends $$missing; \
	fi

# $(call build-tree,CABAL,BIN): build everything, gather the binaries in BIN.
define build-tree
	$(1) v2-build all --offline
	@for exe in $(EXES); do cp "$$($(1) list-bin --offline $$exe)" $(2)/$$exe; done
	$(MAKE) -s -C bench/c OUT=$(2)
endef

# $(call run-suites,BIN): both test suites.
define run-suites
	$(1)/weft-test +RTS -N2 -RTS
	$(1)/weft-warp-test +RTS -N2 -RTS
endef

build: deps
	@mkdir -p $(CABAL_HOME) $(BIN)
	$(call build-tree,$(CABAL),$(BIN))

test: build portable sdist-check
	$(call run-suites,$(BIN))
	scripts/redis-suite $(BIN)/weft-kv

# Redis's own TCL test suite against weft-kv (the units it claims; skips
# in test/redis-skip.txt). The redis source comes from Debian's archive
# once and is kept in $(WEFT_REDIS_SRC_CACHE) (default /var/cache/weft-redis-src).
redis-suite: build
	scripts/redis-suite $(BIN)/weft-kv

# The release tarballs, unpacked alone, build and pass both suites.
sdist-check: deps
	@mkdir -p $(CABAL_HOME)
	scripts/sdist-check $(CABAL)

# The portable core: the library, three servers and the test suite built
# without the Linux-only parts (cabal flag portable: no epoll, eventfd,
# AF_PACKET, accept4, sendfile, recvmmsg), as on another POSIX system, in
# their own build directory; then each server answers, and the suite runs
# on the poll backend (all of it but the AF_PACKET tests).
PORTABLE := $(CABAL) --builddir=$(CURDIR)/dist-portable
PORTABLE_EXES := weft-pong weft-sws weft-kv
portable: deps
	$(PORTABLE) v2-build -f portable lib:weft $(addprefix exe:,$(PORTABLE_EXES)) test:weft-test --offline
	scripts/portable-smoke $(foreach e,$(PORTABLE_EXES),$$($(PORTABLE) list-bin -f portable --offline $(e)))
	$$($(PORTABLE) list-bin -f portable --offline weft-test) +RTS -N2 -RTS

# make bench: the headline benchmarks, under 15 minutes, the headline
# table first; make bench-full: every benchmark (35 minutes or so).
bench: build
	$(BIN)/weft-bench all

bench-full: build
	$(BIN)/weft-bench all --full

# Haddock for both libraries, offline, in a build directory of its own, so
# that documenting never touches the binaries `make build` gathers from
# dist-newstyle. Debian's ghc package ships haddock. The HTML lands in dist-docs/build/*/ghc-*/PACKAGE-*/doc/html/PACKAGE/.
DOCS := $(CABAL) --builddir=$(CURDIR)/dist-docs
docs: deps
	@mkdir -p $(CABAL_HOME)
	$(DOCS) v2-haddock --offline --haddock-hyperlink-source lib:weft lib:weft-warp
	@for p in weft weft-warp; do \
	  find $(CURDIR)/dist-docs -path "*/doc/html/$$p/index.html" -printf "weft: $$p's Haddock: %p\n"; \
	done

# The other compilers: GHC 9.6 (Debian trixie) and GHC 9.10 (Debian sid),
# each in a Debian chroot with that release's libraries, made once and
# cached in $(GHCS_CACHE) (scripts/ghcs). Each builds the whole tree in
# its own build directory and runs both suites. An archive that cannot
# give a suite's GHC skips that compiler, loudly; a build or test failure
# fails.
GHC_SUITES ?= trixie sid
export WEFT_GHCS_CACHE := $(GHCS_CACHE)
test-ghcs:
	@skipped=""; for s in $(GHC_SUITES); do \
	  rc=0; scripts/ghcs setup $$s || rc=$$?; \
	  if [ $$rc -eq 3 ]; then echo "weft: *** SKIPPING Debian $$s: its archive has no installable GHC set ***" >&2; skipped="$$skipped $$s"; continue; fi; \
	  [ $$rc -eq 0 ] || exit $$rc; \
	  echo "weft: testing on GHC $$(scripts/ghcs ghc $$s) (Debian $$s)"; \
	  scripts/ghcs test $$s || exit 1; \
	done; \
	if [ -n "$$skipped" ]; then echo "weft: *** compilers skipped:$$skipped ***" >&2; fi

# Inside a chroot (scripts/ghcs): build and test with that chroot's GHC,
# in a build directory of its own.
GHC_SUITE ?= host
GCABAL := env CABAL_DIR=$(CURDIR)/.cabal-home-$(GHC_SUITE) cabal --config-file=$(CURDIR)/cabal.config --builddir=$(CURDIR)/dist-$(GHC_SUITE)
GBIN = $(CURDIR)/dist-$(GHC_SUITE)/bin
ghc-build:
	@mkdir -p $(CURDIR)/.cabal-home-$(GHC_SUITE) $(GBIN)
	$(call build-tree,$(GCABAL),$(GBIN))
ghc-test: ghc-build
	$(call run-suites,$(GBIN))

# The headline benchmarks on GHC 9.10 (Debian sid): weft, GHC 9.10's own
# manager and stock warp 3.4, all built by GHC 9.10.3, into
# bench-results/ghc-9.10/: simple, pong, warp, timers and wait, each with
# BENCH_REPS interleaved repetitions (default 5).
BENCH_REPS ?= 5
bench-ghc910: deps
	scripts/ghcs setup sid
	scripts/ghcs run sid make ghc-bench GHC_SUITE=sid BENCH_RESULTS=bench-results/ghc-9.10 BENCH_REPS=$(BENCH_REPS)

BENCH_RESULTS ?= bench-results/ghc-$(GHC_SUITE)
ghc-bench: ghc-build
	@mkdir -p $(BENCH_RESULTS)
	export WEFT_BENCH_RESULTS=$(CURDIR)/$(BENCH_RESULTS); \
	for s in simple pong warp timers wait; do \
	  $(GBIN)/weft-bench $$s --reps $(BENCH_REPS) 2>&1 | tee $(CURDIR)/$(BENCH_RESULTS)/$$s.txt; \
	  [ $${PIPESTATUS[0]} -eq 0 ] || exit 1; \
	done

clean:
	rm -rf dist-newstyle dist-portable dist-docs $(CABAL_HOME) bench-results dist-trixie dist-sid .cabal-home-trixie .cabal-home-sid
