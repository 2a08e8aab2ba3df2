# epochfs - plain Makefile. Quiet by default (V=1 for full command lines).
#   make                 build the daemon and the tools into build/
#   make test            unit + integration tests (installs missing packages)
#   make demo            generate a small dataset, mount it, read epochs
#   make bench           the benchmarks of docs/benchmarks.md
#   make fuzz            the peer protocol decoder under libFuzzer (FUZZ_SECONDS)
#   make SANITIZE=address,undefined   sanitizer build (into build-san/)
#   CI=true              adds -Werror

V ?= 0
ifeq ($(V),0)
Q = @
say = @printf '  %-6s %s\n' $(1) $(2);
else
Q =
say =
endif

CC ?= cc
PKGS := fuse3 liburing libxxhash libturbojpeg libjpeg libsodium
BUILD := build
CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Wstrict-prototypes -Wmissing-declarations -Wwrite-strings -Wshadow
ifneq ($(CI),)
WARN += -Werror
endif
ifneq ($(SANITIZE),)
BUILD := build-san
CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(SANITIZE)
endif

# Evaluated when a recipe runs, i.e. after the dependency check below.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS))
PKG_LIBS = $(shell pkg-config --libs $(PKGS))
ALL_CFLAGS = -std=gnu11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -Ifs -Iprep -Itools $(PKG_CFLAGS) -MMD -MP
LIBS = $(PKG_LIBS) -lpthread -lm

CORE_SRC := fs/log.c fs/path.c fs/index.c fs/storage.c fs/stats.c fs/control.c \
	    fs/watch.c fs/core.c fs/options.c fs/cache.c fs/maint.c fs/prepdir.c \
	    fs/owner.c fs/cluster.c fs/proto.c fs/peer.c
PREP_SRC := prep/jpeg.c prep/augment.c prep/batch.c prep/spec.c prep/folder.c prep/group.c
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o) $(PREP_SRC:%.c=$(BUILD)/%.o)
CORE_LIB := $(BUILD)/libepochfs.a

DAEMON := $(BUILD)/epochfs
TOOLS := $(BUILD)/epochfs-gen $(BUILD)/epochfs-bench $(BUILD)/epochfs-stat $(BUILD)/epochfs-prep
TOOL_OBJ := $(BUILD)/tools/mstats.o
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

DEPS_STAMP := $(BUILD)/.deps-ok

all: $(DAEMON) $(TOOLS)

$(DEPS_STAMP): tools/install-deps.sh
	$(Q)pkg-config --exists $(PKGS) criterion libsodium && command -v fio >/dev/null \
	   && command -v fusermount3 >/dev/null && command -v pgrep >/dev/null && command -v clang >/dev/null \
	   && command -v ip >/dev/null && command -v nsenter >/dev/null || bash tools/install-deps.sh
	$(Q)mkdir -p $(@D) && touch $@

$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	$(call say,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The resampler's float loops vectorize at -O3 only (gcc 12's -O2 cost
# model leaves them scalar): 0.75 -> 0.46 ms an image for resize and store,
# measured in docs/benchmarks.md (part 5). Only this file: elsewhere -O3
# buys nothing measurable and grows the code.
$(BUILD)/prep/augment.o: CFLAGS += -O3

$(CORE_LIB): $(CORE_OBJ)
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(DAEMON): $(BUILD)/fs/main.o $(BUILD)/fs/ops.o $(CORE_LIB)
	$(call say,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/epochfs-%: $(BUILD)/tools/%.o $(TOOL_OBJ) $(CORE_LIB)
	$(call say,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(TOOL_OBJ) $(CORE_LIB)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) -lcriterion

# Helpers the integration tests run (not installed tools).
TEST_HELPERS := $(BUILD)/tests/mkjpeg

$(BUILD)/tests/mkjpeg: $(BUILD)/tests/integration/mkjpeg.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# The peer protocol's decoder under libFuzzer (clang; ASan and UBSan on).
# `make test` runs it briefly; `make fuzz FUZZ_SECONDS=N` longer (default 300).
FUZZ := $(BUILD)/fuzz_proto
FUZZ_SECONDS ?= 300
$(FUZZ): tests/fuzz/fuzz_proto.c fs/proto.c fs/proto.h | $(DEPS_STAMP)
	$(call say,FUZZ,$@)
	$(Q)mkdir -p $(@D)
	$(Q)clang -std=gnu11 -D_GNU_SOURCE -g -O1 -Ifs -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=all -o $@ tests/fuzz/fuzz_proto.c fs/proto.c

fuzz-smoke: $(FUZZ)
	$(Q)mkdir -p $(BUILD)/fuzz-corpus
	$(Q)$(FUZZ) -max_total_time=8 -max_len=8192 -print_final_stats=0 $(BUILD)/fuzz-corpus 2>$(BUILD)/fuzz.log \
		|| { tail -40 $(BUILD)/fuzz.log; exit 1; }
	$(Q)echo "fuzz_proto: $$(grep -o 'Done [0-9]* runs' $(BUILD)/fuzz.log | tail -1), no crash"

fuzz: $(FUZZ)
	$(Q)mkdir -p $(BUILD)/fuzz-corpus
	$(FUZZ) -max_total_time=$(FUZZ_SECONDS) -max_len=8192 $(BUILD)/fuzz-corpus

# Criterion runs each test in a child whose sanitizer reports (a leak, a
# UBSan "runtime error") do not fail the test: the log is searched for them.
unit: $(UNIT_BIN)
	$(Q)for t in $(UNIT_BIN); do echo "== $$t"; $$t --timeout 60 -j2 >$(BUILD)/unit.log 2>&1; st=$$?; \
		cat $(BUILD)/unit.log; [ $$st -eq 0 ] || exit $$st; \
		if grep -qE 'ERROR: (Leak|Address)Sanitizer|runtime error:' $(BUILD)/unit.log; then \
			echo "$$t: sanitizer report above"; exit 1; fi; done

integration: all $(TEST_HELPERS)
	$(Q)BUILD=$(BUILD) bash tests/integration/run.sh

test: unit fuzz-smoke integration

demo: all
	$(Q)BUILD=$(BUILD) bash tools/demo.sh

bench: all
	$(Q)BUILD=$(BUILD) bash tools/bench/run.sh

clean:
	rm -rf build build-san

.PHONY: all unit integration test demo bench clean fuzz fuzz-smoke
.SECONDARY:

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
