# wirelab: `make demo` runs the built-in examples, `make test` the whole suite.
# Both install what is missing first (scripts/deps.sh), so they work on a
# fresh Debian 12 machine as root.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO_FLAGS := --release --locked
WIRELAB := ./target/release/wirelab

.PHONY: all deps build demo test bench clean-lab schema goldens fuzz

all: build

deps:
	@MAKECMDGOALS="$(MAKECMDGOALS)" scripts/deps.sh

build: deps
	cargo build $(CARGO_FLAGS)

demo: build
	$(WIRELAB) run specs/demo/*.yaml

# Unit tests, BPF_PROG_TEST_RUN fixtures, lab tests in real namespaces.
# First, what killed runs left on this machine (a test run that is killed
# cannot clean up after itself, and the lab tests check that nothing of any
# run remains); labs whose run is alive are kept.
test: build
	$(WIRELAB) clean
	cargo test $(CARGO_FLAGS) --workspace

bench: build
	$(WIRELAB) bench switch-overhead --breakdown
	$(WIRELAB) bench stages
	$(WIRELAB) bench eswitch
	$(WIRELAB) bench capture
	$(WIRELAB) bench analyze
	$(WIRELAB) bench roce
	$(WIRELAB) bench vaqm
	$(WIRELAB) bench runs
	$(WIRELAB) bench load

# Reruns the specs behind the analyzer goldens and rewrites their reviewed
# findings (review the diff before committing).
goldens: build
	scripts/goldens.sh

# Fuzzes the trace reader and the packet parser (nightly + cargo-fuzz,
# installed here if missing) for FUZZ_SECONDS each; crashes land in
# fuzz/artifacts/. The committed corpus also runs in `make test`.
FUZZ_SECONDS ?= 120
fuzz: deps
	rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
	command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	cd fuzz && cargo +nightly fuzz run -O read_trace corpus/read_trace -- -max_total_time=$(FUZZ_SECONDS)
	cd fuzz && cargo +nightly fuzz run -O parse_packet corpus/parse_packet -- -max_total_time=$(FUZZ_SECONDS)

# Removes namespaces left by killed runs.
clean-lab: build
	$(WIRELAB) clean

schema: build
	$(WIRELAB) schema > specs/wirelab.schema.json
	$(WIRELAB) schema --analysis > docs/analysis.schema.json
