# gem: one top-level make.  make | make check | make check SANITIZE=1 | make bench | make install | make deps | make demo
PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
VERSION  = 0.1.0

PKGS     = libcurl jansson zlib libmicrohttpd
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN     = -Wall -Wextra -Werror
CFLAGS  ?= -O2 -g
ALL_CFLAGS = -std=c11 $(CFLAGS) $(WARN) -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L \
             -DGEM_VERSION='"$(VERSION)"' -DGEM_SHARE='"$(PREFIX)/share/gem"' \
             -Ilib $(PKG_CFLAGS)
LIBS     = $(PKG_LIBS) -lblis -lm -lpthread

ifeq ($(SANITIZE),1)
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
CMD_SH   = $(wildcard cmd/gem-*.sh)
PROGS    = $(CMD_C:cmd/%.c=$(BIN)/%) $(CMD_SH:cmd/%.sh=$(BIN)/%)
T_C      = $(wildcard t/t[0-9]*.c)
T_PROGS  = $(T_C:t/%.c=$(O)/t/%.t)
T_SH     = $(wildcard t/t[0-9]*.sh)
PERF_C   = $(wildcard t/perf/*.c)
PERF     = $(PERF_C:t/perf/%.c=$(O)/perf/%)

.PHONY: all check check-layers test bench install deps demo clean figures experiment
.SECONDARY:
all: $(PROGS)

# Each object depends on the headers it includes (-MMD writes them, -MP survives a removed one).
$(O)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

-include $(LIB_OBJ:.o=.d) $(CMD_C:%.c=$(O)/%.d) $(T_C:%.c=$(O)/%.d) $(PERF_C:%.c=$(O)/%.d)

$(LIBGEM): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN)/%: $(O)/cmd/%.o $(LIBGEM)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBGEM) $(LIBS)

$(BIN)/%: cmd/%.sh
	@mkdir -p $(dir $@)
	sed 's/@GEM_VERSION@/$(VERSION)/' $< > $@ && chmod +x $@

$(O)/t/%.t: $(O)/t/%.o $(LIBGEM)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBGEM) $(LIBS)

$(O)/perf/%: $(O)/t/perf/%.o $(LIBGEM)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBGEM) $(LIBS)

# Every test is a TAP producer; t/run-test runs a compiled test or a shell test.
check: deps
	$(MAKE) check-layers
	$(MAKE) test

# A lower layer of lib/ never includes a higher one (README, "Layout").
check-layers:
	sh t/check-layers

# test: the suite alone, for machines whose packages are in place
test: $(PROGS) $(T_PROGS)
	GEM_BIN=$(abspath $(BIN)) GEM_SRC=$(CURDIR) prove -j2 --timer --exec $(CURDIR)/t/run-test $(T_PROGS) $(T_SH)

bench: $(PROGS) $(PERF)
	GEM_BIN=$(abspath $(BIN)) GEM_SRC=$(CURDIR) GEM_BENCH_LAST=$(abspath $(O))/bench-last.tsv sh t/perf/run $(O)/perf

deps:
	sh share/gem/install-deps.sh

demo: deps
	$(MAKE) all
	GEM_SHARE_DIR=$(CURDIR)/share/gem PATH=$(abspath $(BIN)):$$PATH sh share/gem/examples/demo.sh

# The README's figures, from a real run (a few minutes on 2 cores).
figures: all
	GEM_SHARE_DIR=$(CURDIR)/share/gem PATH=$(abspath $(BIN)):$$PATH sh share/gem/figures.sh

# The GEM paper's experiment with gem-sim (long: see share/gem/experiments/gem-paper.sh).
experiment: all
	GEM_BIN=$(abspath $(BIN)) GEM_SHARE_DIR=$(CURDIR)/share/gem PATH=$(abspath $(BIN)):$$PATH \
		sh share/gem/experiments/gem-paper.sh $(or $(OUT),build/experiment)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	           $(DESTDIR)$(PREFIX)/share/man/man7 $(DESTDIR)$(PREFIX)/share/gem
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(wildcard man/man1/*.1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 $(wildcard man/man7/*.7) $(DESTDIR)$(PREFIX)/share/man/man7/
	cp -R share/gem/. $(DESTDIR)$(PREFIX)/share/gem/

clean:
	rm -rf build bin
