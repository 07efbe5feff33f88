# Airtime's one task runner: the README and CI use these targets verbatim.
SHELL := /bin/bash
.DEFAULT_GOAL := help
export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/airtime_demo
export CARGO_TERM_COLOR ?= never

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

prerequisites:  ## Check the toolchain, the wasm target and PostgreSQL, installing what can be installed
	@scripts/prerequisites.sh

# The dashboard: web/ (Vite + React + TypeScript) built into web/dist, which the control plane embeds
# (control-plane/build.rs). npm ci installs exactly the lock file; skipped while dist is newer than
# every source.
WEB_SOURCES := $(shell find web/src web/public -type f 2>/dev/null) web/index.html web/package.json web/package-lock.json web/vite.config.ts web/tsconfig.json
web: web/dist/index.html  ## Build the dashboard (npm ci && npm run build in web/; needs Node.js 20 and npm)

web/dist/index.html: $(WEB_SOURCES)
	@scripts/prerequisites.sh
	cd web && npm ci --no-audit --no-fund && npm run build
	@touch $@

build: prerequisites web  ## Build every binary (the policies are compiled to Wasm by the build)
	cargo build --workspace --bins

demo: build  ## Run a local demo: control plane, an agent for this host, an agent with simulated GPUs
	@scripts/demo.sh

# `cargo test --workspace` builds every binary as well (the packages with binaries have integration
# tests), with the same features as the tests: building them first with `cargo build` would compile
# a second copy of the dependencies whose features the dev-dependencies widen.
test: prerequisites web  ## Run the whole test suite against the local PostgreSQL, then schemathesis on the API
	@scripts/prerequisites.sh --for-tests
	cd web && npm test
	cargo test --workspace --no-fail-fast
	scripts/api-fuzz.sh
	scripts/check-deploy.sh

fuzz: prerequisites  ## Fuzz the decoders of guest output and agent messages (FUZZ_SECONDS each, default 30)
	scripts/fuzz.sh

lint: prerequisites web  ## cargo fmt --check and clippy with warnings as errors
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

bench: prerequisites web  ## Run the benchmarks (see BENCHMARKS.md) with release binaries
	cargo build --release --workspace --bins
	AIRTIME_BIN_DIR=$(CURDIR)/target/release cargo bench -p airtime-policy-host -p airtime-control-plane -p airtime-tests

.PHONY: help prerequisites web build demo test lint bench fuzz
