# weft: the two README commands are `make bench` and `make test`.
# Both install what is missing (Debian packages only) and build offline.

SHELL := /bin/bash

# cabal keeps its state inside the checkout and reads the repository-less
# config kept here, so a build never reaches for Hackage.
CABAL_HOME := $(CURDIR)/.cabal-home
CABAL := env CABAL_DIR=$(CABAL_HOME) cabal --config-file=$(CURDIR)/cabal.config

DEB_PACKAGES := ghc cabal-install libghc-hspec-dev libghc-quickcheck2-dev \
                libghc-primitive-dev libghc-async-dev \
                libghc-network-dev gcc make wrk nginx-light gnuplot-nox \
                redis-server redis-tools iproute2 util-linux \
                libghc-warp-dev libghc-wai-dev libghc-http-types-dev \
                libghc-streaming-commons-dev nghttp2-client curl \
                liburing-dev
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

BIN = $(CURDIR)/dist-newstyle/bin

.PHONY: all deps build test bench clean portable

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

build: deps
	@mkdir -p $(CABAL_HOME) $(BIN)
	$(CABAL) v2-build all --offline
	@for exe in weft-test weft-bench weft-simple-server weft-echo weft-echo-nonthreaded weft-pong weft-sws weft-kv weft-fwd weft-pktgen weft-pktcheck \
	           weft-warp-test weft-warp-pong; do \
	  cp "$$($(CABAL) list-bin --offline $$exe)" $(BIN)/$$exe; done
	$(MAKE) -s -C bench/c OUT=$(BIN)

test: build portable
	$(BIN)/weft-test +RTS -N2 -RTS
	$(BIN)/weft-warp-test +RTS -N2 -RTS

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

bench: build
	$(BIN)/weft-bench all

clean:
	rm -rf dist-newstyle dist-portable $(CABAL_HOME) bench-results
