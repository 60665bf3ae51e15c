# Tenzro Train node. The two commands a newcomer needs:
#   make demo   - a local training run: node + 8 PyTorch trainers -> sealed, verified receipt;
#                 prints the dashboard URL and serves it until Ctrl-C (DEMO_KEEP=0: stop at the end)
#   make test   - everything CI runs (installs what it needs: Go modules, clang/lld, the Python venv)

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
GOTEST_FLAGS ?= -timeout 15m

.PHONY: all build test test-go test-python test-acceptance demo testnet venv tools deps fmt vet lint fuzz bench clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/tenzro ./cmd/tenzro-node

deps:
	$(GO) mod download

# clang and lld rebuild the built-in Wasm plugins (the reproducibility test
# compares the rebuilt bytes with the committed ones, and fails without the
# clang named in plugins/builtin/wasm/TOOLCHAIN: Debian bookworm's clang-14).
# Node.js/npm run Helia and ipfs-cid is Debian's CID calculator (dataset interop
# tests); the Helia test installs its pinned npm packages into ~/.cache/tenzro/helia-<hash>.
# chromium renders the run dashboard in e2e's headless-browser test.
CLANG_MAJOR := 14
tools:
	@command -v clang-$(CLANG_MAJOR) >/dev/null && command -v wasm-ld-$(CLANG_MAJOR) >/dev/null || { \
	  echo ">> installing clang-$(CLANG_MAJOR) and lld-$(CLANG_MAJOR) from Debian" >&2; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq clang-$(CLANG_MAJOR) lld-$(CLANG_MAJOR) >/dev/null; }
	@command -v wasm-ld >/dev/null || { [ -x /usr/bin/wasm-ld-$(CLANG_MAJOR) ] && ln -sf /usr/bin/wasm-ld-$(CLANG_MAJOR) /usr/local/bin/wasm-ld; } || true
	@command -v chromium >/dev/null || { \
	  echo ">> installing chromium from Debian (the dashboard's headless-browser test)" >&2; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }
	@command -v node >/dev/null && command -v npm >/dev/null || { echo ">> installing nodejs and npm from Debian (Helia interop test)" >&2; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -qq nodejs npm >/dev/null 2>&1 || { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }; }
	@command -v ipfs_cid >/dev/null || { echo ">> installing ipfs-cid from Debian (dataset CID interop test)" >&2; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -qq ipfs-cid >/dev/null 2>&1 || { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq ipfs-cid >/dev/null; }; }

# The Python venv lives outside the clone, keyed by a hash of the trainer's
# requirements, so CI and `make demo` reuse it (PyTorch is gigabytes).
venv:
	@scripts/venv.sh >/dev/null

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

test: deps tools venv vet test-go test-python test-acceptance
	@echo "make test: all suites passed"

test-go:
	TENZRO_PYTHON=$$(scripts/venv.sh)/bin/python $(GO) test $(GOTEST_FLAGS) ./...

# PYTHONPATH puts this clone's trainer ahead of the shared venv's editable install.
# TENZRO_BIN_DIR lets the trainer's real-node tests reuse the binaries `build` made.
test-python: build
	@V=$$(scripts/venv.sh); $$V/bin/ruff check trainer bench && $$V/bin/ruff format --check trainer bench && \
	  PYTHONPATH=$(CURDIR)/trainer/src TENZRO_BIN_DIR=$(BIN) $$V/bin/python -m pytest -q trainer/tests

test-acceptance: build
	@if [ -f ../shared/acceptance/cli_flow.py ]; then python3 ../shared/acceptance/cli_flow.py; \
	else echo "no ../shared/acceptance beside this clone: skipping the acceptance scripts"; fi
	DEMO_ROUNDS=3 DEMO_KEEP=0 TENZRO_BIN_DIR=$(BIN) scripts/demo.sh
	DEMO_ROUNDS=2 DEMO_KEEP=0 DEMO_CODEC=int4-block TENZRO_BIN_DIR=$(BIN) scripts/demo.sh

demo:
	scripts/demo.sh

# A 4-validator chain on loopback (CometBFT embedded): prints each node's RPC address.
testnet: build
	TENZRO_BIN_DIR=$(BIN) scripts/testnet.sh

fuzz:
	$(GO) test ./wire/safetensors -run '^$$' -fuzz FuzzParse -fuzztime 30s
	$(GO) test ./rpc -run '^$$' -fuzz . -fuzztime 30s
	for f in FuzzParseRef FuzzCARReader FuzzCorpusHashCSV; do $(GO) test ./dataset -run '^$$' -fuzz "^$$f\$$" -fuzztime 30s || exit 1; done
	$(GO) test ./plugins/internal/b3leaf -run '^$$' -fuzz FuzzLeafCV -fuzztime 30s
	for f in FuzzTreeHash FuzzBlobHash; do $(GO) test ./plugins -run '^$$' -fuzz "^$$f\$$" -fuzztime 30s || exit 1; done

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./syncer/... ./rpc/... ./store/... ./plugins/... ./attest/...

clean:
	rm -rf $(BIN)
