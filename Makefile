# wirelab: `make demo` runs the built-in examples, `make test` the whole suite.
# Both install what is missing first (scripts/deps.sh), so they work on a
# fresh Debian 12 machine as root.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO_FLAGS := --release --locked
WIRELAB := ./target/release/wirelab

.PHONY: all deps build demo test bench clean-lab schema

all: build

deps:
	@MAKECMDGOALS="$(MAKECMDGOALS)" scripts/deps.sh

build: deps
	cargo build $(CARGO_FLAGS)

demo: build
	$(WIRELAB) run specs/demo/*.yaml

# Unit tests, BPF_PROG_TEST_RUN fixtures, lab tests in real namespaces.
test: build
	cargo test $(CARGO_FLAGS) --workspace

bench: build
	$(WIRELAB) bench switch-overhead
	$(WIRELAB) bench capture

# Removes namespaces left by killed runs.
clean-lab: build
	$(WIRELAB) clean

schema: build
	$(WIRELAB) schema > wirelab.schema.json
