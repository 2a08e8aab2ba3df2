# epochfs - plain Makefile. Quiet by default (V=1 for full command lines).
#   make                 build the daemon and the tools into build/
#   make test            unit + integration tests (installs missing packages)
#   make demo            generate a small dataset, mount it, read epochs
#   make bench           the benchmarks of docs/benchmarks.md
#   make fuzz            the libFuzzer harnesses of tests/fuzz (FUZZ_SECONDS each)
#   make SANITIZE=address,undefined   sanitizer build (into build-san/)
#   make CUDA=1          also the GPU path (prep/gpu/: libepochfs_gpu.so, epochfs-gpuprobe;
#                        needs nvcc), into build-cuda/; CPU builds are unchanged
#   CI=true              adds -Werror
#   LIBFUSE=system|built which libfuse to link (default: the system's when it
#                        is >= 3.17, else Debian's source package built into
#                        deps/; docs/install.md)
#   make distclean       also the libfuse built in deps/ (its downloads stay)

# Recipes use bash (PIPESTATUS, [[ ]]); every machine make test supports has it.
SHELL := /bin/bash

V ?= 0
ifeq ($(V),0)
Q = @
say = @printf '  %-6s %s\n' $(1) $(2);
else
Q =
say =
endif

CC ?= cc
# The libraries every program links; libfuse (below) only the daemon.
SYS_PKGS := liburing libxxhash libturbojpeg libjpeg libsodium
PKGS := fuse3 $(SYS_PKGS)
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
CUDA ?=
WITH_CUDA := $(filter-out 0,$(CUDA))
ifneq ($(WITH_CUDA),)
BUILD := $(BUILD)-cuda
endif

# Evaluated when a recipe runs, i.e. after the dependency check below.
PKG_CFLAGS = $(shell pkg-config --cflags $(SYS_PKGS))
PKG_LIBS = $(shell pkg-config --libs $(SYS_PKGS))

# libfuse. Kernel passthrough and FUSE over io_uring need 3.17 or newer;
# Debian 12 has 3.14. So the system's libfuse when it is new enough, else
# Debian's fuse3 source package, fetched into deps/download/ once (make
# clean keeps it), checked against the sha256 pinned here, and built by
# tools/libfuse/build.sh (with its patches) into a static library under
# deps/libfuse-VERSION/ that build/, build-san/ and build-cuda/ share.
# Static, so an installed daemon needs nothing from the build tree
# (docs/install.md, "libfuse").
LIBFUSE_MIN := 3.17
LIBFUSE_DEB := 3.18.3-1
LIBFUSE_DSC_SHA256 := 90396d7bd6bdb2f7d414babeaaf6a9c637a13bdb7d18e28c4e34432ba9b425bc
DEPS_DIR := deps
LIBFUSE_TREE := $(DEPS_DIR)/libfuse-$(LIBFUSE_DEB)
LIBFUSE_STAMP := $(LIBFUSE_TREE)/.built
ifeq ($(filter system built,$(LIBFUSE)),)
LIBFUSE := $(if $(shell pkg-config --atleast-version=$(LIBFUSE_MIN) fuse3 2>/dev/null && echo y),system,built)
endif
ifeq ($(LIBFUSE),system)
FUSE_PC := pkg-config
FUSE_BUILT :=
else
FUSE_PC := PKG_CONFIG_PATH=$(CURDIR)/$(LIBFUSE_TREE)/root/usr/lib/pkgconfig pkg-config --define-prefix
FUSE_BUILT := $(LIBFUSE_STAMP)
endif
FUSE_CFLAGS = $(shell $(FUSE_PC) --cflags fuse3)
FUSE_LIBS = $(shell $(FUSE_PC) --libs fuse3)
# Which libfuse the adapter was compiled against: a change (another pin,
# the system's instead) recompiles it and relinks the daemon.
FUSE_WHICH := $(LIBFUSE) $(if $(FUSE_BUILT),$(LIBFUSE_DEB),$(shell pkg-config --modversion fuse3 2>/dev/null))
ALL_CFLAGS = -std=gnu11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -Ifs -Iprep -Itools $(PKG_CFLAGS) -MMD -MP
LIBS = $(PKG_LIBS) -lpthread -lm

# fs/ is the daemon (main, options) and its FUSE adapter (ops.c and
# ops_session.c, the only files that include fuse_lowlevel.h); below it, by
# layer (docs/design.md):
#   fs/core/    the filesystem without FUSE: namespaces, read path, .epochfs/, .prep/, counters
#   fs/store/   where names and bytes live: index, RAM cache, storage, manifest
#   fs/cluster/ partitioned peers: ownership, peer lists, protocol, client, server
#   fs/util/    the log, a sync waiter, the memory watch, service notify, trust checks, the version,
#               the monotonic clock, the worker thread's lifecycle, the request threads' time slice,
#               the io_uring reader, the metrics server
CORE_SRC := fs/util/log.c fs/util/memwatch.c fs/util/notify.c fs/util/trust.c fs/util/httpd.c fs/util/clock.c \
	    fs/util/worker.c fs/util/sched.c fs/util/uring.c fs/options.c \
	    fs/core/aside.c fs/core/admit.c fs/core/core.c fs/core/nodes.c fs/core/read.c fs/core/plan.c fs/core/prefetch.c fs/core/memory.c \
	    fs/core/metrics.c fs/core/passthrough.c fs/core/stats.c fs/core/watch.c fs/core/where.c \
	    fs/core/ns/control.c fs/core/ns/order.c fs/core/ns/order_follow.c fs/core/ns/prepdir.c fs/core/ns/prepspec.c \
	    fs/core/ns/ns_control.c fs/core/ns/ns_order.c fs/core/ns/ns_prep.c \
	    fs/store/index.c fs/store/path.c fs/store/storage.c fs/store/cache.c fs/store/cache_mem.c fs/store/backing.c fs/store/maint.c fs/store/staging.c fs/store/spread.c \
	    fs/store/manifest.c fs/store/manifest_build.c fs/store/persist.c fs/store/persist_table.c fs/store/persist_states.c \
	    fs/store/tier.c fs/store/tier_write.c \
	    fs/cluster/owner.c fs/cluster/cluster.c fs/cluster/proto.c fs/cluster/peer.c \
	    fs/cluster/peer_client.c fs/cluster/peer_server.c
PREP_SRC := prep/jpeg.c prep/augment.c prep/batch.c prep/spec.c prep/folder.c prep/group.c prep/group_pool.c prep/group_pt.c
# prep/gpu/: the GPU consumer's plain C half (the CPU reference of its
# conversion, batch file checks, the consumer over a host backend), in every
# build so the unit tests cover it; the CUDA half is below, CUDA=1 only.
GPU_C_SRC := prep/gpu/normalize.c prep/gpu/batchfile.c prep/gpu/backend_host.c prep/gpu/consumer.c
PREP_SRC += $(GPU_C_SRC)
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o) $(PREP_SRC:%.c=$(BUILD)/%.o)
CORE_LIB := $(BUILD)/libepochfs.a

DAEMON := $(BUILD)/epochfs
TOOLS := $(BUILD)/epochfs-gen $(BUILD)/epochfs-bench $(BUILD)/epochfs-stat $(BUILD)/epochfs-prep \
	 $(BUILD)/epochfs-manifest $(BUILD)/epochfs-warmup
TOOL_OBJ := $(BUILD)/tools/mstats.o $(BUILD)/tools/mwhere.o
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

DEPS_STAMP := $(BUILD)/.deps-ok
TEST_DEPS_STAMP := $(BUILD)/.test-deps-ok

all: $(DAEMON) $(TOOLS) $(BUILD)/epochfs-run $(BUILD)/epochfs-analyze $(GPU_LIB) $(GPU_TOOLS) man

# epochfs-run and epochfs-analyze: launchers over the Python package in
# python/ (pure Python), which the build tree runs from where it is.
$(BUILD)/epochfs-run $(BUILD)/epochfs-analyze: $(BUILD)/%: tools/%.sh | $(DEPS_STAMP)
	$(call say,GEN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)sed 's|@PYTHONDIR@|$(CURDIR)/python|' $< > $@ && chmod +x $@

# Two sets of packages (tools/install-deps.sh): what building needs (a
# container image builds with these alone), and what the tests add.
$(DEPS_STAMP): tools/install-deps.sh
	$(Q)pkg-config --exists $(PKGS) && command -v fusermount3 >/dev/null \
	   $(if $(FUSE_BUILT),&& command -v meson >/dev/null && command -v ninja >/dev/null && pkg-config --exists numa) \
	   || bash tools/install-deps.sh build
	$(Q)mkdir -p $(@D) && touch $@

$(LIBFUSE_STAMP): $(wildcard tools/libfuse/*) | $(DEPS_STAMP)
	$(call say,FUSE,$(LIBFUSE_TREE))
	$(Q)rm -f $@ && V=$(V) bash tools/libfuse/build.sh $(LIBFUSE_DEB) $(LIBFUSE_DSC_SHA256) $(DEPS_DIR)

$(BUILD)/.libfuse: FORCE | $(DEPS_STAMP)
	$(Q)mkdir -p $(@D); [ "$$(cat $@ 2>/dev/null)" = "$(FUSE_WHICH)" ] || echo "$(FUSE_WHICH)" > $@

# Only the adapter includes fuse_lowlevel.h (tools/layers.py).
$(BUILD)/fs/ops.o $(BUILD)/fs/ops_session.o: ALL_CFLAGS += $(FUSE_CFLAGS)
$(BUILD)/fs/ops.o $(BUILD)/fs/ops_session.o: $(BUILD)/.libfuse $(FUSE_BUILT)

$(TEST_DEPS_STAMP): tools/install-deps.sh | $(DEPS_STAMP)
	$(Q)pkg-config --exists criterion && command -v fio >/dev/null \
	   && command -v pgrep >/dev/null && command -v clang >/dev/null \
	   && command -v ip >/dev/null && command -v nsenter >/dev/null && command -v nft >/dev/null \
	   && command -v groff >/dev/null && command -v man >/dev/null \
	   && /usr/bin/python3 -c 'import torchvision, ensurepip, yaml' 2>/dev/null \
	   || bash tools/install-deps.sh test
	$(Q)touch $@

$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	$(call say,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The resampler's float loops vectorize at -O3 only (gcc 12's -O2 cost
# model leaves them scalar): 0.75 -> 0.46 ms an image for resize and store,
# measured in docs/benchmarks.md (part 5). Only this file: elsewhere -O3
# buys nothing measurable and grows the code.
$(BUILD)/prep/augment.o: CFLAGS += -O3

# The GPU kernel computes x * mul + add as a multiply and an add; the
# reference it is checked against must not fuse them either, whatever -march.
$(BUILD)/prep/gpu/normalize.o $(BUILD)/pic/prep/gpu/normalize.o: ALL_CFLAGS += -ffp-contract=off

$(CORE_LIB): $(CORE_OBJ)
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(DAEMON): $(BUILD)/fs/main.o $(BUILD)/fs/ops.o $(BUILD)/fs/ops_session.o $(CORE_LIB) $(BUILD)/.libfuse
	$(call say,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) $(FUSE_LIBS) $(LIBS)

# epochfs-stat's modes, one file each (tools/stat_int.h).
$(BUILD)/epochfs-stat: $(BUILD)/tools/stat_list.o $(BUILD)/tools/stat_file.o

$(BUILD)/epochfs-%: $(BUILD)/tools/%.o $(TOOL_OBJ) $(CORE_LIB)
	$(call say,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(UNIT_BIN:$(BUILD)/tests/%=$(BUILD)/tests/unit/%.o): | $(TEST_DEPS_STAMP)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(TOOL_OBJ) $(CORE_LIB)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) -lcriterion

# The GPU path (docs/prep.md, "The GPU consumer"), CUDA=1 only: the CUDA
# runtime from nvcc's own tree, found through nvcc; the shared library is
# what python/epochfs/gpu.py loads (position-independent copies of the C
# half, plus the .cu files), and epochfs-gpuprobe links it.
ifneq ($(WITH_CUDA),)
NVCC ?= nvcc
NVCC_PATH := $(shell command -v $(NVCC) 2>/dev/null)
ifeq ($(NVCC_PATH),)
$(error CUDA=1: $(NVCC) not found: put CUDA's bin/ on PATH or set NVCC=/path/to/nvcc)
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(NVCC_PATH)))
CUDA_LIBDIR ?= $(CUDA_HOME)/lib64
NVFLAGS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	   -gencode arch=compute_90,code=compute_90
NV_WARN := -Xcompiler -Wall,-Wextra,-Wshadow
ifneq ($(CI),)
NV_WARN += -Werror all-warnings -Xcompiler -Werror
endif
NV_ALL = -std=c++17 -O2 -g $(NVFLAGS) $(NV_WARN) -Xcompiler -fPIC -Iprep -MMD -MP
CUDA_LIBS := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudart -lstdc++ -ldl -lpthread
GPU_OBJ := $(GPU_C_SRC:%.c=$(BUILD)/pic/%.o) $(BUILD)/pic/prep/gpu/libgpu.o \
	   $(patsubst %.cu,$(BUILD)/cu/%.o,prep/gpu/normalize.cu prep/gpu/backend_cuda.cu prep/gpu/probe.cu)
GPU_LIB := $(BUILD)/libepochfs_gpu.so
GPU_TOOLS := $(BUILD)/epochfs-gpuprobe

$(BUILD)/pic/%.o: %.c | $(DEPS_STAMP)
	$(call say,CC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -fPIC -c -o $@ $<

$(BUILD)/cu/%.o: %.cu | $(DEPS_STAMP)
	$(call say,NVCC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(NVCC) $(NV_ALL) -c -o $@ $<

$(GPU_LIB): $(GPU_OBJ)
	$(call say,LINK,$@)
	$(Q)$(CC) -shared $(LDFLAGS) -o $@ $^ $(CUDA_LIBS)

$(BUILD)/epochfs-gpuprobe: $(BUILD)/tools/gpuprobe.o $(GPU_LIB)
	$(call say,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< -L$(BUILD) -lepochfs_gpu -Wl,-rpath,'$$ORIGIN' $(CUDA_LIBS)

# tests/cuda/run.sh's check: real batches made by prep's own code, read by
# the consumer on the host and on the GPU, compared byte for byte.
$(BUILD)/tests/cuda/gpu_check.o: ALL_CFLAGS += -I$(CUDA_HOME)/include
$(BUILD)/tests/gpu_check: $(BUILD)/tests/cuda/gpu_check.o $(BUILD)/prep/batch.o $(BUILD)/prep/jpeg.o \
		$(BUILD)/prep/augment.o $(GPU_LIB)
	$(call say,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -L$(BUILD) -lepochfs_gpu -Wl,-rpath,'$$ORIGIN/..' \
		$(CUDA_LIBS) $(LIBS)
endif

# The man pages, written by hand in docs/man/ (NAME.SECTION), with the
# release and the guides' directory filled in: into $(BUILD)/man/manN/ for
# `man -l` and the tests (tests/integration/t_man.sh), and by make install
# with the install's own DOCDIR.
VERSION := $(shell sed -n 's/^\#define EPOCHFS_VERSION "\(.*\)"/\1/p' fs/util/version.h)
MAN_PAGES := $(wildcard docs/man/*.[18])
MAN_SED = sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@DOCDIR@|$(DOCDIR)|g'
MAN_BUILT := $(foreach p,$(MAN_PAGES),$(BUILD)/man/man$(subst .,,$(suffix $(p)))/$(notdir $(p)))

man: $(MAN_BUILT)

$(BUILD)/man/man1/%.1: docs/man/%.1 fs/util/version.h
	$(call say,MAN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(MAN_SED) $< > $@

$(BUILD)/man/man8/%.8: docs/man/%.8 fs/util/version.h
	$(call say,MAN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(MAN_SED) $< > $@

# Helpers the integration tests run (not installed tools).
TEST_HELPERS := $(BUILD)/tests/mkjpeg

$(BUILD)/tests/mkjpeg: $(BUILD)/tests/integration/mkjpeg.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# libFuzzer harnesses (clang; ASan and UBSan on), each over the code it
# names: proto (the peer protocol's decoder), text (prep specs, peer lists,
# SLURM hostlists), jpeg (one prep sample from untrusted bytes: probe, crop,
# DCT-scaled decode, resample), state (the cache state table the RAM cache
# and the SSD tier adopt at start, written, damaged and adopted again). `make test` runs each briefly (FUZZ_SMOKE
# seconds); `make fuzz` runs them one after another for FUZZ_SECONDS each
# (default 300), or only those in FUZZERS="...". Corpora stay in
# $(BUILD)/fuzz-corpus/NAME between runs.
FUZZERS ?= proto text jpeg state
FUZZ_SECONDS ?= 300
FUZZ_SMOKE ?= 6
FUZZ_CC := clang -std=gnu11 -D_GNU_SOURCE -g -O1 -Ifs -Iprep -Itools -fsanitize=fuzzer,address,undefined \
	   -fno-sanitize-recover=all
FUZZ_SRC_proto := fs/cluster/proto.c
FUZZ_SRC_text := fs/cluster/cluster.c prep/spec.c
FUZZ_SRC_jpeg := prep/batch.c prep/jpeg.c prep/augment.c
FUZZ_SRC_state := fs/store/persist.c fs/store/persist_table.c fs/store/cache.c fs/store/cache_mem.c fs/store/backing.c fs/store/path.c fs/store/index.c \
		   fs/util/trust.c fs/util/log.c fs/util/clock.c
FUZZ_LIBS_jpeg := -ljpeg
FUZZ_LIBS_proto := -lsodium
CORPUS := $(BUILD)/fuzz-corpus

.SECONDEXPANSION:
$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $$(FUZZ_SRC_$$*) $$(wildcard $$(patsubst %.c,%.h,$$(FUZZ_SRC_$$*))) \
		| $(TEST_DEPS_STAMP)
	$(call say,FUZZ,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(FUZZ_CC) -o $@ $(filter %.c,$^) $(FUZZ_LIBS_$*) -lm

# Seeds for the JPEG harness: 4 parameter bytes, then a small valid JPEG of
# each kind the workers meet.
$(CORPUS)/jpeg/.seeded: $(BUILD)/tests/mkjpeg
	$(Q)mkdir -p $(@D)
	$(Q)for k in rgb rgb420 gray cmyk progressive; do \
		$(BUILD)/tests/mkjpeg $$k 40 32 $(@D)/.tmp.jpg && \
		{ printf '\040\003\001\002'; cat $(@D)/.tmp.jpg; } > $(@D)/seed-$$k || exit 1; done
	$(Q)rm -f $(@D)/.tmp.jpg && touch $@

# One harness for SECONDS: NAME SECONDS [EXTRA FLAGS]. The smoke run takes a
# fixed seed: a test run checks for regressions along the same paths every
# time, and `make fuzz` (a fresh seed each run) explores.
define run_fuzzer
	mkdir -p $(CORPUS)/$(1) && \
	$(BUILD)/fuzz_$(1) -max_total_time=$(2) $(3) -timeout=10 -max_len=8192 -print_final_stats=0 \
		-artifact_prefix=$(BUILD)/fuzz_$(1)- $(CORPUS)/$(1) \
		2>$(BUILD)/fuzz_$(1).log || { tail -40 $(BUILD)/fuzz_$(1).log; exit 1; }; \
	echo "fuzz_$(1): $$(grep -o 'Done [0-9]* runs' $(BUILD)/fuzz_$(1).log | tail -1), no crash"
endef

fuzz-smoke: $(FUZZERS:%=$(BUILD)/fuzz_%) $(CORPUS)/jpeg/.seeded
	$(Q)mkdir -p $(SUMMARY); rm -f $(SUMMARY)/fuzz; \
	$(foreach f,$(FUZZERS),$(call run_fuzzer,$(f),$(FUZZ_SMOKE),-seed=1) && ) \
	echo "fuzzers       $(words $(FUZZERS)) harnesses, $(FUZZ_SMOKE) s each, no crash" > $(SUMMARY)/fuzz

fuzz: $(FUZZERS:%=$(BUILD)/fuzz_%) $(CORPUS)/jpeg/.seeded
	$(Q)$(foreach f,$(FUZZERS),$(call run_fuzzer,$(f),$(FUZZ_SECONDS)) && ) true

# Criterion runs each test in a child whose sanitizer reports (a leak, a
# UBSan "runtime error") do not fail the test: the log is searched for them.
# A passing program prints one line (the messages its tests provoke on
# purpose stay in $(BUILD)/unit-all.log); a failing one its whole log.
# Each suite leaves one line in $(SUMMARY) when it passes; make test ends
# with them as one total.
SUMMARY := $(BUILD)/summary
unit: $(UNIT_BIN)
	$(Q)mkdir -p $(SUMMARY); rm -f $(SUMMARY)/unit; : > $(BUILD)/unit-all.log; \
	for t in $(UNIT_BIN); do $$t --timeout 60 -j2 >$(BUILD)/unit.log 2>&1; st=$$?; \
		cat $(BUILD)/unit.log >> $(BUILD)/unit-all.log; \
		if [ $$st -ne 0 ]; then cat $(BUILD)/unit.log; echo "$$t: FAILED (its whole log above)"; exit $$st; fi; \
		if grep -qE 'ERROR: (Leak|Address)Sanitizer|runtime error:' $(BUILD)/unit.log; then \
			cat $(BUILD)/unit.log; echo "$$t: sanitizer report above"; exit 1; fi; \
		printf '%-28s %s\n' "$${t##*/}" "$$(grep -o 'Tested: [0-9]* | Passing: [0-9]*' $(BUILD)/unit.log)"; done; \
	awk '/Synthesis:/ {p += $$7} END {printf "unit tests    %d passed in $(words $(UNIT_BIN)) programs\n", p}' \
		$(BUILD)/unit-all.log > $(SUMMARY)/unit

integration: all $(TEST_HELPERS) $(TEST_DEPS_STAMP)
	$(Q)mkdir -p $(SUMMARY); rm -f $(SUMMARY)/integration; \
	BUILD=$(BUILD) bash tests/integration/run.sh | tee $(BUILD)/integration.log; st=$${PIPESTATUS[0]}; \
	[ $$st = 0 ] && tail -1 $(BUILD)/integration.log | sed 's/^integration: /integration   /' > $(SUMMARY)/integration; \
	exit $$st

# The Python package's unit tests (the analyzer's model, options, step timer).
pyunit: $(TEST_DEPS_STAMP)
	$(Q)mkdir -p $(SUMMARY); rm -f $(SUMMARY)/python; \
	PYTHONPATH=$(CURDIR)/python /usr/bin/python3 -m unittest discover -s tests/python -t tests/python \
		2>&1 | tee $(BUILD)/pyunit.log; st=$${PIPESTATUS[0]}; \
	[ $$st = 0 ] && awk '/^Ran / {n = $$2} /^OK/ && match($$0, /skipped=[0-9]+/) {k = substr($$0, RSTART + 8, RLENGTH - 8)} \
		END {printf "python tests  %d passed, %d skipped\n", n - k, k}' $(BUILD)/pyunit.log > $(SUMMARY)/python; \
	exit $$st

# The GPU path (tests/cuda/run.sh): built with CUDA=1 into build-cuda/ when
# nvcc is here; what needs a GPU is skipped without one (exit 77).
cuda-test:
	$(Q)mkdir -p $(SUMMARY); rm -f $(SUMMARY)/cuda; \
	bash tests/cuda/run.sh | tee $(BUILD)/cuda-test.log; st=$${PIPESTATUS[0]}; \
	[ $$st = 0 ] && echo "GPU path      passed" > $(SUMMARY)/cuda; \
	[ $$st = 77 ] && tail -1 $(BUILD)/cuda-test.log | sed 's/^cuda-test: SKIP: /GPU path      skipped: /' > $(SUMMARY)/cuda; \
	[ $$st = 0 ] || [ $$st = 77 ]

# The physical layers (tools/layers.py): util/ and store/ include nothing
# above them, only the adapter speaks FUSE, no include cycle.
layers:
	$(Q)mkdir -p $(SUMMARY); rm -f $(SUMMARY)/layers; \
	python3 tools/layers.py && echo "layers        include rules hold" > $(SUMMARY)/layers

# Everything the suites run, built in one go: CI builds it with -j first
# (make test itself runs the suites one after another, so it is not run
# with -j), then runs make test on the finished tree. The fuzzers are the
# same in every build (FUZZ_CC), so a sanitizer build leaves them out.
test-build: all $(UNIT_BIN) $(TEST_HELPERS) $(if $(SANITIZE),,$(FUZZERS:%=$(BUILD)/fuzz_%))

# CI's sanitizer pass (.ci/run): the C code under ASan and UBSan, i.e. the
# unit tests and the integration suite on build-san/. The Python tests, the
# fuzzers (always built with the sanitizers) and the GPU path do not depend
# on SANITIZE and ran in make test already.
test-san-suites: layers unit integration
	$(Q)echo "== sanitizer pass: every suite passed"; \
	for s in layers unit integration; do cat $(SUMMARY)/$$s; done | sed 's/^/   /'

test: layers unit cuda-test pyunit fuzz-smoke integration
	$(Q)echo "== make test: every suite passed"; \
	for s in layers unit cuda python fuzz integration; do cat $(SUMMARY)/$$s; done | sed 's/^/   /'

demo: all
	$(Q)BUILD=$(BUILD) DEMO_JSON=$(if $(JSON),1,0) bash tools/demo.sh

bench: all $(TEST_DEPS_STAMP)
	$(Q)BUILD=$(BUILD) bash tools/bench/run.sh

# Installation, by the GNU conventions: make install PREFIX=/usr DESTDIR=...
# The daemon and tools go to BINDIR, mount(8)'s helper mount.fuse.epochfs
# to SBINDIR (mount looks in /sbin: with PREFIX=/usr it is there; else
# link it, or rely on fuse3's mount.fuse3, which finds /usr/local/bin/epochfs
# on its default PATH), the Python package to
# PYTHONDIR (epochfs-run and epochfs-analyze point there), the man pages of
# docs/man/ to MANDIR, the guides (README.md, docs/*.md) and a sample
# /etc/epochfs/NAME.conf to DOCDIR, the systemd unit epochfs@.service to
# SYSTEMDUNITDIR (systemd reads /usr/local/lib/systemd/system too); its
# per-mount settings are read from SYSCONFDIR/epochfs/ (/etc, not
# PREFIX/etc: a service's configuration lives there whatever the prefix).
# pip users install the Python package alone: pip install ./python.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SBINDIR ?= $(PREFIX)/sbin
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
DOCDIR ?= $(DATADIR)/doc/epochfs
PYTHONDIR ?= $(PREFIX)/lib/epochfs/python
# The package is byte-compiled for this Python at install: every Python
# process of a job under epochfs-run loads the boot shim, and a job's user
# cannot write its cache into PYTHONDIR (compiling it each time is ~1.7 ms).
PYTHON ?= python3
SYSCONFDIR ?= /etc
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
INSTALL ?= install
INSTALL_BINS := epochfs epochfs-gen epochfs-bench epochfs-stat epochfs-prep epochfs-manifest epochfs-warmup
DOCS := README.md $(wildcard docs/*.md)
SAMPLE_CONF := tools/systemd/mnt-imagenet.conf

install: all
	$(Q)$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(PYTHONDIR) $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(DOCDIR)/examples
	$(Q)for b in $(INSTALL_BINS); do $(INSTALL) -m 755 $(BUILD)/$$b $(DESTDIR)$(BINDIR)/$$b || exit 1; done
	$(Q)$(INSTALL) -m 755 tools/mount.fuse.epochfs $(DESTDIR)$(SBINDIR)/mount.fuse.epochfs
	$(Q)for b in epochfs-run epochfs-analyze; do \
		sed 's|@PYTHONDIR@|$(PYTHONDIR)|' tools/$$b.sh > $(DESTDIR)$(BINDIR)/$$b && chmod 755 $(DESTDIR)$(BINDIR)/$$b || exit 1; done
	$(Q)sed 's|@BINDIR@|$(BINDIR)|g; s|@SYSCONFDIR@|$(SYSCONFDIR)|g; s|@DOCDIR@|$(DOCDIR)|g' tools/systemd/epochfs@.service \
		> $(DESTDIR)$(SYSTEMDUNITDIR)/epochfs@.service && chmod 644 $(DESTDIR)$(SYSTEMDUNITDIR)/epochfs@.service
	$(Q)cp -R python/epochfs python/epochfs_prep.py $(DESTDIR)$(PYTHONDIR)/ && find $(DESTDIR)$(PYTHONDIR) -name __pycache__ -prune -exec rm -rf {} +
	$(Q)if command -v $(PYTHON) >/dev/null 2>&1; then \
		$(PYTHON) -m compileall -q -d $(PYTHONDIR) $(DESTDIR)$(PYTHONDIR) >/dev/null || exit 1; fi
	$(Q)for p in $(MAN_PAGES); do n=$${p##*/}; \
		$(MAN_SED) $$p > $(DESTDIR)$(MANDIR)/man$${n##*.}/$$n && chmod 644 $(DESTDIR)$(MANDIR)/man$${n##*.}/$$n || exit 1; done
	$(Q)$(INSTALL) -m 644 $(DOCS) $(DESTDIR)$(DOCDIR)/
	$(Q)$(INSTALL) -m 644 $(SAMPLE_CONF) $(DESTDIR)$(DOCDIR)/examples/
	@echo "installed into $(DESTDIR)$(PREFIX)"

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(INSTALL_BINS) epochfs-run epochfs-analyze)
	rm -f $(DESTDIR)$(SBINDIR)/mount.fuse.epochfs $(DESTDIR)$(SYSTEMDUNITDIR)/epochfs@.service
	rm -f $(foreach p,$(MAN_PAGES),$(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(p)))/$(notdir $(p)))
	rm -f $(addprefix $(DESTDIR)$(DOCDIR)/,$(notdir $(DOCS))) $(DESTDIR)$(DOCDIR)/examples/$(notdir $(SAMPLE_CONF))
	rm -rf $(DESTDIR)$(PYTHONDIR)
	-rmdir $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) $(DESTDIR)$(PREFIX)/lib/epochfs 2>/dev/null

clean:
	rm -rf build build-san build-cuda build-san-cuda

# The libfuse builds too; deps/download/ stays (an offline rebuild needs it).
distclean: clean
	rm -rf $(DEPS_DIR)/libfuse-*

FORCE:

.PHONY: all man unit pyunit integration test test-build test-san-suites demo bench clean distclean fuzz fuzz-smoke cuda-test install \
	uninstall layers FORCE
.SECONDARY:

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
