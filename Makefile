# gem: one top-level make.  make | make check | make check SANITIZE=1 | make check-hosts | make bench | make install | make deps | make demo
PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
VERSION  = 0.1.0

PKGS     = libcurl jansson zlib libmicrohttpd libdeflate
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN     = -Wall -Wextra -Werror
CFLAGS  ?= -O2 -g
# -ffp-contract=off: no a·b + c fused where the source does not ask for it. gcc's ISO C mode
# already does so; clang fuses by default, and then its scalar kernels no longer give the
# vector kernels' floats (t1008, t1009), which replay across machines relies on.
ALL_CFLAGS = -std=c11 -ffp-contract=off $(CFLAGS) $(WARN) -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L \
             -DGEM_VERSION='"$(VERSION)"' -DGEM_SHARE='"$(PREFIX)/share/gem"' \
             -Ilib $(PKG_CFLAGS)
LIBS     = $(PKG_LIBS) -lblis -lm -lpthread

ifeq ($(FUZZ),1)
# make fuzz's build (t/fuzz/run): libgem instrumented for libFuzzer, with ASan and UBSan
O       ?= build/fuzz
ALL_CFLAGS += -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
              -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=address,undefined
BIN     ?= $(O)/bin
else ifeq ($(TSAN),1)
# make check TSAN=1: the programs and tests under ThreadSanitizer
O       ?= build/tsan
ALL_CFLAGS += -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=thread
BIN     ?= $(O)/bin
else ifeq ($(SANITIZE),1)
O       ?= build/san
BIN     ?= $(O)/bin
ALL_CFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=address,undefined
else
O       ?= build/rel
BIN     ?= bin
endif

LIB_SRC  = $(wildcard lib/*/*.c)
LIB_OBJ  = $(LIB_SRC:%.c=$(O)/%.o)
LIBGEM   = $(O)/libgem.a
CMD_C    = $(wildcard cmd/gem-*.c)
PROGS    = $(CMD_C:cmd/%.c=$(BIN)/%)
T_C      = $(wildcard t/t[0-9]*.c)
T_PROGS  = $(T_C:t/%.c=$(O)/t/%.t)
T_SH     = $(wildcard t/t[0-9]*.sh)
PERF_C   = $(wildcard t/perf/*.c)
PERF     = $(PERF_C:t/perf/%.c=$(O)/perf/%)
FUZZ_C   = $(wildcard t/fuzz/fuzz-*.c)
FUZZERS  = $(FUZZ_C:t/fuzz/%.c=$(O)/fuzz/%)
FUZZ_SECONDS ?= 60
ifeq ($(TSAN),1)
# the tests with threads: the kernels' pool (t1010), the servers, their clients, SGP nodes
# (t3*), hostile input (t6*); a race fails the test. Not t3400 (gem-run's signals: it times
# SIGTERM against the first commit, which a ThreadSanitizer build is too slow to make)
T_RUN    = $(filter $(O)/t/t1010% $(O)/t/t3%,$(T_PROGS)) \
	   $(filter-out t/t3400%,$(filter t/t3% t/t6%,$(T_SH)))
TEST_ENV = TSAN_OPTIONS="halt_on_error=1 exitcode=66 $(TSAN_OPTIONS)"
else
T_RUN    = $(T_PROGS) $(T_SH)
endif

.PHONY: all check check-layers check-hosts test bench install deps deps-hosts demo clean figures experiment experiment-real experiment-lowcomm experiment-lm-rules experiment-scale-hosts fuzz fuzzers
.SECONDARY:
all: $(PROGS)

# Each object depends on the headers it includes (-MMD writes them, -MP survives a removed one).
$(O)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

-include $(LIB_OBJ:.o=.d) $(CMD_C:%.c=$(O)/%.d) $(T_C:%.c=$(O)/%.d) $(PERF_C:%.c=$(O)/%.d) \
	 $(FUZZ_C:%.c=$(O)/%.d)

$(LIBGEM): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN)/%: $(O)/cmd/%.o $(LIBGEM)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBGEM) $(LIBS)

$(O)/t/%.t: $(O)/t/%.o $(LIBGEM)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBGEM) $(LIBS)

$(O)/perf/%: $(O)/t/perf/%.o $(LIBGEM)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBGEM) $(LIBS)

$(O)/fuzz/%: $(O)/t/fuzz/%.o $(LIBGEM)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $< $(LIBGEM) $(LIBS)

# Every test is a TAP producer; t/run-test runs a compiled test or a shell test.
check: deps
	$(MAKE) check-layers
	$(MAKE) test

# A lower layer of lib/ never includes a higher one (README, "Layout").
check-layers:
	sh t/check-layers

# test: the suite alone, for machines whose packages are in place
# (the benchmarks are built too, so that a change cannot leave them behind); --comments shows
# a failing test's output (its # lines), so that a failure says why in CI's log too
test: $(PROGS) $(T_PROGS) $(PERF)
	GEM_BIN=$(abspath $(BIN)) GEM_SRC=$(CURDIR) $(TEST_ENV) prove -j2 --timer --comments --exec $(CURDIR)/t/run-test $(T_RUN)

bench: $(PROGS) $(PERF)
	GEM_BIN=$(abspath $(BIN)) GEM_SRC=$(CURDIR) GEM_PERF=$(abspath $(O))/perf GEM_BENCH_LAST=$(abspath $(O))/bench-last.tsv sh t/perf/run $(O)/perf

deps:
	sh share/gem/install-deps.sh

# Real hosts (t/README, "Real hosts"): network namespaces with their own sshd, and a one-node Slurm.
# Root only (each test skips itself otherwise); a few minutes on 2 cores.
deps-hosts:
	sh share/gem/install-deps.sh hosts

check-hosts: deps-hosts $(PROGS)
	GEM_BIN=$(abspath $(BIN)) GEM_SRC=$(CURDIR) prove --timer --comments --exec $(CURDIR)/t/run-test t/hosts/t*.sh

# libFuzzer on the parsers (t/fuzz/README): each target FUZZ_SECONDS from t/fuzz/corpus.
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) MAKE="$(MAKE)" sh t/fuzz/run $(FUZZ_TARGETS)

fuzzers: $(FUZZERS)

demo: deps
	$(MAKE) all
	GEM_SHARE_DIR=$(CURDIR)/share/gem PATH=$(abspath $(BIN)):$$PATH sh share/gem/examples/demo.sh

# The figures of README.md and doc/results/gem-ref.md, from a real run (a few minutes on 2 cores).
figures: all
	GEM_SHARE_DIR=$(CURDIR)/share/gem PATH=$(abspath $(BIN)):$$PATH sh share/gem/figures.sh

# The GEM paper's experiment with gem-sim (long: see share/gem/experiments/gem-paper.sh).
experiment: all
	GEM_BIN=$(abspath $(BIN)) GEM_SHARE_DIR=$(CURDIR)/share/gem PATH=$(abspath $(BIN)):$$PATH \
		sh share/gem/experiments/gem-paper.sh $(or $(OUT),build/experiment)

# DiLoCo and asynchronous DiLoCo against sync with real workers: accuracy and bytes on the wire
# (its default cells, one seed: 6 to 10 minutes on this machine; SEEDS="1 2 3" for three)
experiment-lowcomm: all
	GEM_BIN=$(abspath $(BIN)) bash share/gem/experiments/lowcomm.sh $(or $(OUT),build/experiment-lowcomm)

# Which rule for a language model: gpt-small on kjv in gem-sim, every rule with 4 and 8 workers,
# equal, with a straggler, on 100 and 10 Mbit/s links with and without int8 (virtual time: load
# does not change the figures; the full grid at one seed is about 35 CPU-minutes; two instances
# on the same OUT share the cells: see share/gem/experiments/lm-rules.sh)
experiment-lm-rules: all
	GEM_BIN=$(abspath $(BIN)) bash share/gem/experiments/lm-rules.sh $(or $(OUT),build/experiment-lm-rules)

# gem past one host: 8 namespace hosts with tbf-limited links, 2 slices, 200 workers, gem and
# sync (as root; see share/gem/experiments/scale-hosts.sh)
experiment-scale-hosts: all
	GEM_BIN=$(abspath $(BIN)) bash share/gem/experiments/scale-hosts.sh $(or $(OUT),build/scale-hosts)

# The experiments with real worker processes (long, and they need a quiet machine: they measure
# wall time): the simulator's calibration and its validation, time to accuracy of every rule,
# GEM against its proxy. Each writes under $(OUT) (default build/), and each is restartable.
experiment-real: all
	GEM_BIN=$(abspath $(BIN)) sh share/gem/experiments/calibrate.sh $(or $(OUT),build)/calibrate
	GEM_BIN=$(abspath $(BIN)) sh share/gem/experiments/validate-sim.sh $(or $(OUT),build)/validate-sim
	GEM_BIN=$(abspath $(BIN)) sh share/gem/experiments/time-to-acc.sh $(or $(OUT),build)/time-to-acc
	GEM_BIN=$(abspath $(BIN)) sh share/gem/experiments/gem-vs-proxy.sh $(or $(OUT),build)/gem-vs-proxy

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	           $(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/man/man7 \
	           $(DESTDIR)$(PREFIX)/share/gem
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(wildcard man/man1/*.1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 $(wildcard man/man5/*.5) $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 644 $(wildcard man/man7/*.7) $(DESTDIR)$(PREFIX)/share/man/man7/
	cp -R share/gem/. $(DESTDIR)$(PREFIX)/share/gem/

clean:
	rm -rf build bin
