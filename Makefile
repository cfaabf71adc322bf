# The software DPU. `make run` and `make test` are all a fresh machine needs: both install the
# missing system packages first (tools/install-deps.sh, idempotent).

CARGO ?= cargo
BIN := target/release/dpu
CONFIG ?= conf/default.toml

.PHONY: all build run demo demo-torch test bench deps fuzz fuzz-ci fuzz-tools plots fmt clippy clean

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

# Real workers on kernel sockets (root: network namespaces): 4 worker processes all-reduce
# 1M-element f32 and bf16 tensors through the appliance on a veth (net_af_packet), without and
# with 1% loss, beside a ring AllReduce over TCP on the same veths; prints per-worker algbw.
# Twice: jumbo frames (MTU 9000, 8896-byte chunks) and standard ones (MTU 1500, 1408-byte
# chunks: the largest multiple of 64 bytes whose frame fits the MTU, tools/e2e/run.py).
# DEMO_ARGS adds options to tools/e2e/run.py (e.g. --clients python, --repeat 10).
DEMO_ARGS ?= --clients rust
demo: build
	python3 tools/e2e/run.py --demo --mtu 9000 --work out/e2e/mtu9000 $(DEMO_ARGS)
	python3 tools/e2e/run.py --demo --mtu 1500 --work out/e2e/mtu1500 $(DEMO_ARGS)

# PyTorch DDP through the appliance, measured (root; `make deps` first): 4 ranks in namespaces
# train an f32 MLP of about 1 M and 25 M parameters, with the appliance and with gloo on the same
# veths, at MTU 9000 and 1500; prints ms/step, the AllReduce share of it and algbw (a table, and
# out/e2e-torch-demo/demo-torch.json). Not part of `make test`.
DEMO_TORCH_ARGS ?=
demo-torch: build
	.venv/bin/python tools/e2e/torch_demo.py $(DEMO_TORCH_ARGS)

# Every test: unit tests, property tests, the functional replays through the real binaries, the
# end-to-end run in network namespaces, and the Python client's tests with .venv (the interpreter
# that has Debian's torch and the native client that `make deps` builds: tests_native compares it
# with the pure-Python one); last, with python3 on PATH, the bench's OpenFlow translation against
# the dpu through a private OVS-DPDK (tools/bench/test_ovs.py, about 5 s), agg_revs.py's
# patch of old agg_profile examples (tools/bench/test_agg_revs.py) and memif.py's reading of the
# cross-core probes (tools/bench/test_memif_modes.py).
# Everything builds once, with the test-release profile (Cargo.toml: release optimisation
# without the whole-program LTO of `make build`, which would double the build time and changes no
# behaviour): the test binaries and the binaries they run (dpu, dpuctl, pktgen, gradclient in
# target/test-release, named to the tests by DPU_BIN_DIR).
TEST_BIN_DIR := $(CURDIR)/target/test-release
test: deps
	$(CARGO) build --profile test-release --workspace --bins
	DPU_BIN_DIR=$(TEST_BIN_DIR) $(CARGO) test --profile test-release --workspace
	DPU_BIN_DIR=$(TEST_BIN_DIR) .venv/bin/python -m unittest discover -s client/python/tests
	.venv/bin/python -m unittest discover -s client/python/tests_native
	DPU_BIN_DIR=$(TEST_BIN_DIR) .venv/bin/python -m unittest discover -s client/python/tests_torch
	DPU_BIN_DIR=$(TEST_BIN_DIR) python3 -m unittest discover -s tools/bench -p 'test_ovs.py'
	python3 -m unittest discover -s tools/bench -p 'test_agg_revs.py'
	python3 -m unittest discover -s tools/bench -p 'test_memif_modes.py'
	python3 -m unittest discover -s tools -p 'test_check_layers.py'
	/usr/bin/python3 -m unittest discover -s tools -p 'test_plot_pktgen.py'

# The packet core alone (criterion, ns per packet), then the dpu beside dpdk-testpmd and OVS-DPDK
# (the pipeline's tables as OpenFlow tables, 1024 and 65,536 flows; tools/bench/ovs.py) on the
# same vdevs (Mpps, one worker core): prints one table, also written to target/bench/results.md.
# BENCH_SECONDS and BENCH_REPS (default 5 and 3) set the length of the DPDK runs; the dpu rows
# are also counted under callgrind (instructions per packet of the worker's burst path).
# Then one collective on one worker thread beside the same collective sharded over two pinned
# worker threads (dataplane/examples/shard_scale.rs: M contributions/s and the ratio, about 15 s),
# and the dpu replaying one collective split over two ports and workers with shard_collectives
# off and on (tools/bench/shard.py, SHARD_REPS, default 3: about 30 s).
# Last, the two-process rows over net_memif (tools/bench/memif.py: MEMIF_SECONDS, MEMIF_REPS,
# MEMIF_ROWS, default 2 s, 1 repetition, every row: about 5 minutes), written to
# target/bench/memif.md, each run with a probe of what reading 1 KiB the other CPU wrote costs;
# then the floor under a contribution's cost over two cores (dataplane/examples/cross_core.rs:
# echo, checksum and fold of frames the other CPU wrote, TSC cycles per frame, about 5 s).
bench: build
	$(CARGO) bench -p dataplane --no-default-features --bench packet_core -- --noplot
	$(CARGO) bench -p dataplane --no-default-features --bench aggregation -- --noplot
	$(CARGO) bench -p dataplane --bench meter -- --noplot
	python3 tools/bench/run.py --callgrind
	python3 tools/bench/agg.py
	$(CARGO) run --release -p dataplane --no-default-features --example shard_scale
	python3 tools/bench/shard.py
	python3 tools/bench/pktgen.py
	$(CARGO) build --release -p dataplane --no-default-features --example cross_core
	python3 tools/bench/memif.py
	$(CARGO) run --release -p dataplane --no-default-features --example cross_core

# Fuzzing (fuzz/, a cargo-fuzz crate outside the workspace): every target for FUZZ_SECONDS
# each, starting from the committed seeds (fuzz/seeds/<target>/) plus whatever earlier runs
# added to fuzz/corpus/<target>/. libFuzzer needs nightly flags; RUSTC_BOOTSTRAP=1 lets the
# stable toolchain accept them. A crash stops the run and leaves its input in fuzz/artifacts/.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := parse pipeline aggregate config control qos

# The generator's pictures: the appliance forwarding over net_memif at 64 to 1518 B, throughput
# against frame size and the latency CDF from pktgen's JSON (tools/plot_pktgen.py), into
# docs/img/pktgen/ (the README shows them). PLOT_SECONDS per size (default 3).
plots: build
	python3 tools/bench/memif.py --plots docs/img/pktgen --seconds $(or $(PLOT_SECONDS),3)

fuzz-tools:
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked || $(CARGO) install cargo-fuzz

fuzz: fuzz-tools
	@set -e; for t in $(FUZZ_TARGETS); do \
		mkdir -p fuzz/corpus/$$t; cp fuzz/seeds/$$t/* fuzz/corpus/$$t/; \
		echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
		(cd fuzz && RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t corpus/$$t -- \
			-max_total_time=$(FUZZ_SECONDS) -print_final_stats=1); \
	done

# The CI's bounded run.
fuzz-ci:
	$(MAKE) fuzz FUZZ_SECONDS=12

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
	rm -rf out
