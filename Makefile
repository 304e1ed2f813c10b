# libfarm top-level targets. The two a new user needs:
#   make demo    build, then run the demo on a 3-machine local cluster
#   make check   build, then run the whole test suite (ctest)
# Both install missing Debian packages first (scripts/install-deps).
# Others: make check-long (variants of make check's cases that another
# case already covers: other fabrics, contained scenarios; label long),
# make bench (every benchmark), make stress (long stress tests),
# make asan (tests under AddressSanitizer+UBSan), make tsan (unit and
# multi-process tests under ThreadSanitizer), make fuzz (every fuzz target
# for FUZZ_SECONDS, default 600, one after another), make netns (tests across
# network namespaces; root, skipped otherwise), make faults (the 50-cycle
# fault campaign), make reuse (500 kill-and-replace cycles, ids reused),
# make scale (a 128-machine cluster forms, commits, loses two machines
# and recovers; minutes, 10 GiB),
# make lint (cppcheck, acquire/release partners, function sizes), make
# proofs (each test-only switch that breaks the code, caught by its
# test), make clean.
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
JOBS ?= 2
CMAKE_FLAGS ?=
FARM ?= $(BUILD)/src/tools/farm

.PHONY: all deps build demo check check-long proofs bench stress faults reuse scale asan tsan fuzz netns lint clean format

all: build

deps:
	@scripts/install-deps

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	@scripts/demo $(FARM)

check: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) -LE "stress|netns|faults|reuse|proof|scale|long"

# Variants of make check's cases whose paths make check already runs in
# another (the same case on another fabric, a scenario another case
# contains; label long): out of make check, which is to stay under about
# 10 minutes; CI runs them after it.
check-long: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) -L long -LE "stress|netns|faults|reuse|proof|scale"

# Each test-only switch that breaks the code, with the test that must then
# fail its checks (label proof): the proof that the tests catch the bugs
# they guard against, run when a checker or its switch changes.
proofs: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) -L proof -LE "netns|stress"

netns: build
	ctest --test-dir $(BUILD) --output-on-failure -L netns

stress: deps
	@cmake -S . -B $(BUILD) -DFARM_STRESS=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)
	ctest --test-dir $(BUILD) --output-on-failure -L stress

# The fault campaign: one cluster under the bank and KV workloads takes
# 50 faults in a row, each followed by full replication and every check
# (tests/fault_campaign.sh --continuous; FAULT_CYCLES=N and FAULT_SEED=S
# to change; FAULT_MODE=--per-scenario for a cluster per cycle;
# FAULT_GROW=1 with growth on, late machines becoming primaries).
FAULT_CYCLES ?= 50
FAULT_MODE ?= --continuous
faults: build
	tests/fault_campaign.sh $(FAULT_MODE) --build $(BUILD) \
	    --cycles $(FAULT_CYCLES) \
	    $(if $(FAULT_SEED),--seed $(FAULT_SEED)) \
	    $(if $(FAULT_GROW),--grow)

# 500 kill-and-replace cycles of one cluster, each replacement a new
# holder of the killed machine's id (config reuse_ids), every check after
# each cycle (hours on 2 cores; test_campaign --reuse).
reuse: build
	ctest --test-dir $(BUILD) --output-on-failure -L reuse

# A 128-machine cluster on this host through a private ZooKeeper server
# (tests/scale_cluster.sh, scale_bench --sizes 128 --zk): forms, commits,
# loses two machines at once, recovers, every commit read back. About 4
# minutes of both cores (233 s at load 14-32) and 10 GiB on 2 cores.
scale: build
	ctest --test-dir $(BUILD) --output-on-failure -L scale

# Only the executables the tests run are built (target test_bins).
asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DFARM_SANITIZE=address,undefined \
	    -DFARM_BUILD_BENCH=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS) --target test_bins
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j$(JOBS) -LE "stress|nosan|netns|faults|reuse|proof|scale"

# Each decoder's fuzz target (tests/fuzz/README.md) for FUZZ_SECONDS,
# one at a time; new inputs stay in $(BUILD)/tests/fuzz-corpus.
FUZZ_SECONDS ?= 600
fuzz: deps
	@cmake -S . -B $(BUILD) -DFARM_FUZZ_LONG_SECONDS=$(FUZZ_SECONDS) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS) --target farm_static
	@cmake --build $(BUILD) --target fuzz

# ThreadSanitizer over the tests labelled tsan (tests/CMakeLists.txt):
# only what they need is built. Suppressions: tests/tsan.supp.
tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -DFARM_SANITIZE=thread \
	    -DFARM_BUILD_BENCH=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(TSAN_BUILD) -j$(JOBS) --target tsan_tests
	ctest --test-dir $(TSAN_BUILD) --output-on-failure -j$(JOBS) -L tsan

bench: build
	@scripts/bench $(BUILD)

# Static analysis of the library (cppcheck): clean, or it fails. A finding
# that is wrong is suppressed where it stands (// cppcheck-suppress ID)
# with the reason beside it. Then scripts/lint-pairs: every acquire and
# release in src/ and examples/ names its partner in a comment ("pairs
# with ..."), or it fails. Then the function-size report (pmccabe):
# functions over 150 lines or cyclomatic complexity 25, for information
# (the library's, then the rest's).
lint: deps
	cppcheck -q -j$(JOBS) --error-exitcode=1 --std=c11 --inline-suppr \
	    --enable=warning,performance,portability -I include -I src src/
	scripts/lint-pairs
	@pmccabe $$(find src -name '*.c') | \
	    awk '$$5 > 150 || $$1 > 25 {n++} END {printf "lint: %d of %d functions over 150 lines or complexity 25\n", n, NR}'
	@pmccabe $$(find examples bench tests -name '*.c') | \
	    awk '$$5 > 150 || $$1 > 25 {n++} END {printf "lint: examples, bench and tests: %d of %d functions over 150 lines or complexity 25\n", n, NR}'

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')
