# The Tokio release matrix: the demo (tools/demo/src/main.rs) built against each supported Tokio
# release as build/demo-tokio-VERSION, for tests/e2e/test_tokio_matrix.py. Debian's 1.24.2 from
# /usr/share/cargo/registry (librust-tokio-dev); the others from vendor/ (tools/vendor-tokio.sh
# made the tarballs from tokio-rs/tokio by tag). Each is a default release build with line tables
# (like demo-nofp) in a workspace of its own, build/tokio-VERSION (tools/tokio-matrix-workspace.sh),
# rebuilt only when the demo, the tarball or these rules change.

TOKIO_MATRIX      := 1.24.2 1.38.2 1.43.4 1.47.5 1.49.0 1.53.1
TOKIO_MATRIX_BINS := $(patsubst %,$(BUILD)/demo-tokio-%,$(TOKIO_MATRIX))

# Vendored releases need a current toolchain (Tokio's MSRV is 1.70+, Debian's rustc is 1.63):
# rustup's cargo first, even when Debian's comes first on PATH.
MATRIX_CARGO ?= $(shell [ -x $$HOME/.cargo/bin/cargo ] && echo $$HOME/.cargo/bin/cargo || echo $(CARGO))

MATRIX_WS_DEPS := tools/tokio-matrix-workspace.sh mk/tokio-matrix.mk

# The workspace of a release: its Cargo.toml stands for the whole tree.
$(BUILD)/tokio-%/Cargo.toml: vendor/tokio-%.tar.xz vendor/pin-project-lite-0.2.17.tar.xz \
		$(MATRIX_WS_DEPS) | $(BUILD)
	tools/tokio-matrix-workspace.sh $* $(BUILD)/tokio-$*

$(BUILD)/tokio-1.24.2/Cargo.toml: $(MATRIX_WS_DEPS) | $(BUILD)
	tools/tokio-matrix-workspace.sh 1.24.2 $(BUILD)/tokio-1.24.2

$(BUILD)/demo-tokio-%: $(BUILD)/tokio-%/Cargo.toml $(DEMO_SRCS)
	@t0=$$(date +%s%N); \
	cd $(BUILD)/tokio-$* && CARGO_TARGET_DIR=$(CURDIR)/$(BUILD)/tokio-$*/target \
		$(MATRIX_CARGO) build --release --offline -q && \
	ds=$$(( ($$(date +%s%N) - t0) / 100000000 )) && \
	echo "demo-tokio-$*: built in $$((ds / 10)).$$((ds % 10)) s"
	cp $(BUILD)/tokio-$*/target/release/dial9-demo $@

# `make test` builds it (the matrix test is tests/e2e/test_tokio_matrix.py).
tokio-matrix: $(TOKIO_MATRIX_BINS)

.PHONY: tokio-matrix
