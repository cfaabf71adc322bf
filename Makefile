# The software DPU. `make run` and `make test` are all a fresh machine needs: both install the
# missing system packages first (tools/install-deps.sh, idempotent).

CARGO ?= cargo
BIN := target/release/dpu
CONFIG ?= conf/default.toml

.PHONY: all build run test bench deps fuzz fmt clippy clean

all: build

deps:
	@tools/install-deps.sh

build: deps
	$(CARGO) build --release --workspace --bins

# The main job: an AllReduce. The generator makes a 4-worker workload, the appliance aggregates
# it on conf/default.toml, the independent checker verifies every result, and a summary shows
# results, resends, drops by reason and the rate.
run: build
	tools/run-allreduce.sh

# Every test: unit tests, property tests, and the functional replays through the real binary.
test: build
	$(CARGO) test --release --workspace

# The packet core alone (criterion, ns per packet), then the dpu beside dpdk-testpmd on the same
# vdevs (Mpps, one worker core): prints one table, also written to target/bench/results.md.
# BENCH_SECONDS and BENCH_REPS (default 5 and 3) set the length of the DPDK runs.
bench: build
	$(CARGO) bench -p dataplane --no-default-features --bench packet_core -- --noplot
	python3 tools/bench/run.py

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
	rm -rf out
