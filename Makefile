# dial9-bpf build. Data flow: bpf/*.bpf.c -> build/*.skel.h -> user/STAGE/*.c -> build/dial9-bpf
# (user/ has one folder per pipeline stage; README.md, "Changing it", lists them).
# `make deps` installs what a fresh Debian 12 machine lacks; `make demo` and `make test` use it.

BUILD     := build
CLANG     ?= clang
BPFTOOL   ?= bpftool
CC        ?= cc
ARCH      := x86
VERSION   := 0.1.0

# Rust toolchain for the demo target: prefer rustup's cargo when the profile did not put it on
# PATH (CI does not read the shell profile), else Debian's.
CARGO     ?= $(shell command -v cargo 2>/dev/null || { [ -x $$HOME/.cargo/bin/cargo ] && echo $$HOME/.cargo/bin/cargo; } || echo /usr/bin/cargo)

DEB_PKGS  := clang llvm bpftool libbpf-dev libelf-dev zlib1g-dev libiberty-dev libdw-dev libdebuginfod-dev libcap-dev \
	     libcmocka-dev libjson-c-dev librust-tokio-dev cargo rustc linux-perf golang-go python3 \
	     jq chromium fonts-dejavu-core binutils util-linux libclang-rt-14-dev wrk debuginfod \
	     libcurl4-openssl-dev

CFLAGS    ?= -O2 -g
CFLAGS    += -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -DDIAL9_VERSION=\"$(VERSION)\" \
	     -Iinclude -I$(BUILD)
LDLIBS    := -lbpf -lelf -ldw -ldebuginfod -lz -liberty -ljson-c -lcap -lcurl -lpthread -lm

BPF_SRCS  := $(wildcard bpf/*.bpf.c)
BPF_OBJS  := $(patsubst bpf/%.bpf.c,$(BUILD)/%.bpf.o,$(BPF_SRCS))
SKELS     := $(patsubst bpf/%.bpf.c,$(BUILD)/%.skel.h,$(BPF_SRCS))
# Every stage folder is on the include path, so a source includes "x.h" wherever x.h lives.
USER_SRCS := $(wildcard user/*/*.c)
USER_HDRS := $(wildcard user/*/*.h)
USER_INC  := $(patsubst %/,-I%,$(sort $(dir $(USER_SRCS) $(USER_HDRS))))
USER_OBJS := $(patsubst user/%.c,$(BUILD)/user/%.o,$(USER_SRCS))
LIB_OBJS  := $(filter-out $(BUILD)/user/cli/main.o,$(USER_OBJS))
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))

.SECONDARY:
.PHONY: all deps demo demo-bin test unit e2e clean format bench

all: $(BUILD)/dial9-bpf

deps:
	@missing=""; for p in $(DEB_PKGS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(BUILD) $(BUILD)/tests:
	@mkdir -p $@

$(BUILD)/vmlinux.h: | $(BUILD)
	$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

$(BUILD)/%.bpf.o: bpf/%.bpf.c $(wildcard bpf/*.bpf.h) $(BUILD)/vmlinux.h $(wildcard include/*.h) | $(BUILD)
	$(CLANG) -g -O2 -Wall -Werror -target bpf -D__TARGET_ARCH_$(ARCH) -Iinclude -I$(BUILD) \
		-c $< -o $@

$(BUILD)/%.skel.h: $(BUILD)/%.bpf.o
	$(BPFTOOL) gen skeleton $< > $@.tmp && mv $@.tmp $@

$(BUILD)/user/%.o: user/%.c $(wildcard include/*.h) $(USER_HDRS) $(SKELS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(USER_INC) -c $< -o $@

$(BUILD)/dial9-bpf: $(USER_OBJS)
	$(CC) $(CFLAGS) $^ $(LDLIBS) -o $@

# Unit tests: each tests/unit/test_X.c links against every user object but main.o.
$(BUILD)/tests/%: tests/unit/%.c $(LIB_OBJS) | $(BUILD)/tests
	$(CC) $(CFLAGS) $(USER_INC) $< $(LIB_OBJS) $(LDLIBS) -lcmocka -o $@

# The demo target: a real Tokio program built offline from Debian's crates, twice: with frame
# pointers forced (fp) and as a default release build (nofp).
DEMO_SRCS := $(wildcard tools/demo/src/*.rs) tools/demo/Cargo.toml tools/demo/.cargo/config.toml
$(BUILD)/demo-fp: $(DEMO_SRCS) | $(BUILD)
	cd tools/demo && CARGO_TARGET_DIR=$(CURDIR)/$(BUILD)/demo-target-fp \
		RUSTFLAGS="-C force-frame-pointers=yes -C symbol-mangling-version=v0" $(CARGO) build --release --offline -q
	cp $(BUILD)/demo-target-fp/release/dial9-demo $@

$(BUILD)/demo-nofp: $(DEMO_SRCS) | $(BUILD)
	cd tools/demo && CARGO_TARGET_DIR=$(CURDIR)/$(BUILD)/demo-target-nofp \
		$(CARGO) build --release --offline -q
	cp $(BUILD)/demo-target-nofp/release/dial9-demo $@

# Park-point ground truth (tests/e2e/test_park_truth.py): join, select and a TCP server, with
# Tokio's net feature, built the same two ways.
PARKTRUTH_SRCS := $(wildcard tools/parktruth/src/*.rs) tools/parktruth/Cargo.toml \
		  tools/parktruth/.cargo/config.toml
$(BUILD)/parktruth-fp: $(PARKTRUTH_SRCS) | $(BUILD)
	cd tools/parktruth && CARGO_TARGET_DIR=$(CURDIR)/$(BUILD)/parktruth-target-fp \
		RUSTFLAGS="-C force-frame-pointers=yes -C symbol-mangling-version=v0" $(CARGO) build --release --offline -q
	cp $(BUILD)/parktruth-target-fp/release/dial9-parktruth $@

$(BUILD)/parktruth-nofp: $(PARKTRUTH_SRCS) | $(BUILD)
	cd tools/parktruth && CARGO_TARGET_DIR=$(CURDIR)/$(BUILD)/parktruth-target-nofp \
		$(CARGO) build --release --offline -q
	cp $(BUILD)/parktruth-target-nofp/release/dial9-parktruth $@

# What a user gets from a plain `cargo build --release`: no debug info (the profile's debug = 1
# overridden), legacy mangling, no frame pointers; and that build stripped, its symbols in a
# separate debug file (tests/e2e/test_names.py installs it in a build-id tree).
$(BUILD)/demo-plain: $(DEMO_SRCS) | $(BUILD)
	cd tools/demo && CARGO_TARGET_DIR=$(CURDIR)/$(BUILD)/demo-target-plain \
		CARGO_PROFILE_RELEASE_DEBUG=0 $(CARGO) build --release --offline -q
	cp $(BUILD)/demo-target-plain/release/dial9-demo $@

$(BUILD)/demo-plain-stripped: $(BUILD)/demo-plain
	objcopy --only-keep-debug $< $@.debug
	strip --strip-all -o $@ $<

demo-bin: $(BUILD)/demo-fp $(BUILD)/demo-nofp $(BUILD)/parktruth-fp $(BUILD)/parktruth-nofp \
	  $(BUILD)/flavours $(BUILD)/demo-plain-stripped

# Runtime flavours (current_thread, two runtimes, LocalSet, spawn_blocking): one binary, with
# frame pointers and the default (legacy) symbol mangling, whose names say nothing of task types.
FLAVOURS_SRCS := $(wildcard tools/flavours/src/*.rs) tools/flavours/Cargo.toml \
	tools/flavours/.cargo/config.toml
$(BUILD)/flavours: $(FLAVOURS_SRCS) | $(BUILD)
	cd tools/flavours && CARGO_TARGET_DIR=$(CURDIR)/$(BUILD)/flavours-target \
		RUSTFLAGS="-C force-frame-pointers=yes" $(CARGO) build --release --offline -q
	cp $(BUILD)/flavours-target/release/dial9-flavours $@

demo: deps
	$(MAKE) all demo-bin
	tools/run-demo.sh

unit: $(UNIT_BINS)

# The Tokio release matrix builds with the rest: each of its cargo builds ends in a chain of
# crates that build one after another, and two builds at a time keep both cores busy.
test: deps
	$(MAKE) -j$(shell nproc) all demo-bin unit fuzz-regress tokio-matrix
	tests/run-tests.sh

format:
	clang-format -i $(wildcard bpf/*.c bpf/*.h user/*/*.c user/*/*.h include/*.h tests/unit/*.c tests/fuzz/*.c tools/*.c)

clean:
	rm -rf $(BUILD)

# Fuzzing: tests/fuzz/fuzz_X.c is a libFuzzer target for user/*/X.c, both built with ASan and
# UBSan (clang; libFuzzer is in libclang-rt-14-dev). `make fuzz` runs each target for
# FUZZ_SECONDS, new inputs going to $(BUILD)/fuzz/corpus-X; `make fuzz-regress` (part of
# `make test`) replays the checked-in corpora tests/fuzz/corpus/X once.
FUZZ_SECONDS ?= 600
FUZZ_CFLAGS  := -g -O1 -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE \
		-DDIAL9_VERSION=\"$(VERSION)\" -Iinclude -I$(BUILD) $(USER_INC) \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS    := $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_TARGETS))

$(BUILD)/fuzz:
	@mkdir -p $@

# Sources a target's file needs besides itself.
FUZZ_DEPS_report := user/output/out_dir.c $(filter-out user/report/report.c,$(wildcard user/report/*.c))

.SECONDEXPANSION:
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $$(wildcard user/*/$$*.c) $$(FUZZ_DEPS_$$*) $(USER_HDRS) | $(BUILD)/fuzz
	$(CLANG) $(FUZZ_CFLAGS) $< $(wildcard user/*/$*.c) $(FUZZ_DEPS_$*) $(LDLIBS) -o $@

fuzz: $(FUZZ_BINS)
	@for t in $(FUZZ_TARGETS); do \
		mkdir -p $(BUILD)/fuzz/corpus-$$t; \
		echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
		if $(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=16384 \
			-print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/ \
			$$([ -f tests/fuzz/$$t.dict ] && echo -dict=tests/fuzz/$$t.dict) \
			$(BUILD)/fuzz/corpus-$$t tests/fuzz/corpus/$$t >$(BUILD)/fuzz/$$t.log 2>&1; \
		then grep -E '^stat::(number_of_executed_units|new_units_added)' $(BUILD)/fuzz/$$t.log; \
		else tail -30 $(BUILD)/fuzz/$$t.log; \
			echo "fuzz_$$t: FAILED; the input is in $(BUILD)/fuzz/, the log in $(BUILD)/fuzz/$$t.log"; \
			exit 1; fi; \
	done

fuzz-regress: $(FUZZ_BINS)
	@for t in $(FUZZ_TARGETS); do \
		if $(BUILD)/fuzz/fuzz_$$t -runs=0 tests/fuzz/corpus/$$t >$(BUILD)/fuzz/$$t.log 2>&1; \
		then echo "fuzz corpus $$t: $$(ls tests/fuzz/corpus/$$t | wc -l) inputs ok"; \
		else echo "fuzz corpus $$t: FAILED, see $(BUILD)/fuzz/$$t.log"; exit 1; fi; \
	done

$(BUILD)/bench-writers: tools/bench-writers.c $(LIB_OBJS)
	$(CC) $(CFLAGS) $(USER_INC) $< $(LIB_OBJS) $(LDLIBS) -o $@

# Writer throughput and peak memory: bench/RESULTS.md, "Writers". BENCH_ARGS=-h lists
# the options.
bench-writers: $(BUILD)/bench-writers
	$(BUILD)/bench-writers $(BENCH_ARGS)

.PHONY: fuzz fuzz-regress bench-writers

# Target overhead of dial9-bpf vs perf record on the demo, interleaved with unprofiled segments:
# bench/RESULTS.md, "Overhead on the target", and bench/overhead-vs-hz.png. Root; about 10
# minutes (15 with BENCH_ARGS="--seg 10"). The plot needs Debian's python3-matplotlib, hence
# /usr/bin/python3. BENCH_ARGS=-h lists the options.
bench-overhead: $(BUILD)/dial9-bpf $(BUILD)/demo-fp
	@dpkg -s python3-matplotlib >/dev/null 2>&1 || \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-matplotlib >/dev/null
	/usr/bin/python3 tools/bench-overhead.py $(BENCH_ARGS)

.PHONY: bench-overhead

$(BUILD)/bench-unwind: tools/bench-unwind.c $(LIB_OBJS)
	$(CC) $(CFLAGS) $(USER_INC) $< $(LIB_OBJS) $(LDLIBS) -o $@

# DWARF unwinding throughput vs perf script on the same raw-stack perf.data: bench/RESULTS.md,
# "Unwinding". Needs a dial9-bpf perf.data of a live pid: BENCH_ARGS="[-n N] FILE PID".
bench-unwind: $(BUILD)/bench-unwind
	$(BUILD)/bench-unwind $(BENCH_ARGS)

.PHONY: bench-unwind

# A spinning, deep-stacked target for perf's in-thread cost (frame pointers kept for perf -g).
$(BUILD)/gapmeter: tools/gapmeter.c user/util/util_clock.c | $(BUILD)
	$(CC) $(CFLAGS) -fno-omit-frame-pointer $(USER_INC) $^ -lpthread -o $@

# perf record's cost inside the threads it samples, interleaved with unprofiled segments:
# bench/RESULTS.md, "perf's cost in the target". Root; BENCH_ARGS=-h lists the options.
bench-perf-cost: $(BUILD)/gapmeter
	/usr/bin/python3 tools/bench-perf-cost.py $(BENCH_ARGS)

.PHONY: bench-perf-cost
include mk/tokio-matrix.mk
