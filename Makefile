# outlierlab — build, test, benchmark and reproduce. `make help` lists every target with one
# line (from the `##` comment on its rule line here and in mk/*.mk). The ones to start with:
#   make reproduce-ID  one experiment (PROFILE=quick|default|paper); make list shows them
#   make test          every test (C and Lua) through prove -j2 --timer; the closing lines say it all
#   make deps          install the Debian packages that building and running experiments need and
#                      that are missing (as root, without recommends), or print the command
#   make test-deps     the same for the packages only the tests need (Slurm, Chromium, …); make test runs it

SHELL   := /bin/bash
CC      ?= cc
PROFILE ?= default
ARCH    ?= -march=native
PKGS    := ompi-c luajit libcjson netcdf
CFLAGS  ?= -O3 $(ARCH)
# -fno-math-errno: sqrtf without errno is one instruction the vectoriser can use (AdamW, norms).
CFLAGS  += -std=c11 -Wall -Wextra -Wno-unused-parameter -fopenmp -fPIC -g -fno-math-errno \
           $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# OpenBLAS's OpenMP build: its threads are libgomp's, the same pool as the engine's kernels.
# (The default pthread build keeps a second pool of spinning threads that fights the engine's
# OpenMP threads for the cores; measured on this 2-core machine under load: 1.5 s vs 0.2–0.3 s
# for one gpt2-tiny training step.)
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
BLAS_DIR  := /usr/lib/$(MULTIARCH)/openblas-openmp
LDLIBS  := $(shell pkg-config --libs $(PKGS) 2>/dev/null) $(BLAS_DIR)/libopenblas.so.0 -Wl,-rpath,$(BLAS_DIR) \
           -lgomp -lm -ldl -lpthread
ENGINE_SRC := $(filter-out engine/host/%,$(wildcard engine/*.c))
ENGINE_OBJ := $(patsubst engine/%.c,build/engine/%.o,$(ENGINE_SRC))
HEADERS    := $(wildcard engine/*.h)
CTESTS     := $(patsubst tests/c/%.c,build/tests/%.t,$(wildcard tests/c/*.c))
LUATESTS   := $(sort $(wildcard tests/lua/*.lua))
# the test files run two at a time (the machine's two cores), each with its time; PROVE_FLAGS= runs them serially
PROVE_FLAGS ?= -j2 --timer

# Debian 12 packages that building and running experiments need, installed without recommends
# (APT_FLAGS): the compiler, LuaJIT, OpenBLAS's OpenMP build (the one the engine links), Open MPI,
# NetCDF, gnuplot with the font the figures name, lua-cjson, the tokenizers' libraries and the
# King James text (--data=kjv). gcc and libc6-dev rather than build-essential: nothing here is C++.
DEB_PKGS := gcc libc6-dev make pkg-config libluajit-5.1-dev libopenblas-openmp-dev libopenmpi-dev \
            openmpi-bin libnetcdf-dev netcdf-bin gnuplot-nox fonts-dejavu-core libcjson-dev lua-cjson \
            libpcre2-8-0 libutf8proc2 bible-kjv
# ... and the ones only the tests need: prove (perl), the NetCDF files read back by Python's
# xarray, a throwaway Slurm cluster (slurm-wlm, munge; tests/lua/test_slurm_live.lua) and
# headless Chromium (the gallery's browser check). A mk/*.mk adds its own with
# `TEST_DEB_PKGS += …`, and other test set-up with `test-deps: its-target`.
TEST_DEB_PKGS := perl python3-xarray python3-netcdf4 slurm-wlm munge chromium
APT_FLAGS ?= --no-install-recommends
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: all build deps test-deps test-deps-apt test test-c test-lua bench bench-peer clean help list reproduce-all
# Builds are serialised by a lock so that several make runs in one tree do not collide.
all: deps ## engine library (static + shared) and bin/outlierlab, after make deps
	@mkdir -p build && flock build/.lock $(MAKE) --no-print-directory build
build: lib/liboutlierlab.a lib/liboutlierlab.so bin/outlierlab ## the same without make deps

# $(call apt_install,PACKAGES): install those of PACKAGES that are missing (as root), or print
# the command and fail (as another user)
define apt_install
@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
if [ -n "$$missing" ]; then \
  if [ "$$(id -u)" = 0 ]; then \
    echo "make $@: installing" $$missing; \
    DEBIAN_FRONTEND=noninteractive apt-get update -q && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_FLAGS) $$missing; \
  else \
    echo "make $@: missing Debian packages; run:"; \
    echo "  sudo apt-get install -y $(APT_FLAGS)" $$missing; exit 1; \
  fi; \
fi
endef

deps: ## install the missing Debian packages that building and running need (as root), or print the command
	$(call apt_install,$(DEB_PKGS))

test-deps: test-deps-apt ## the same for the packages only the tests need (Slurm, munge, Chromium, xarray, npm, …)
# the apt step alone: test set-up that needs its packages (npm fetches) depends on this one
test-deps-apt: deps ## the apt step of test-deps alone
	$(call apt_install,$(TEST_DEB_PKGS))

build/engine/%.o: engine/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

lib/liboutlierlab.a: $(ENGINE_OBJ)
	@mkdir -p lib
	rm -f $@ && ar rcs $@ $^

lib/liboutlierlab.so: $(ENGINE_OBJ)
	@mkdir -p lib
	$(CC) -shared -fopenmp -o $@ $^ $(LDLIBS)

bin/outlierlab: engine/host/main.c lib/liboutlierlab.a
	@mkdir -p bin
	$(CC) $(CFLAGS) -o $@ $< -Wl,-E -Wl,--whole-archive lib/liboutlierlab.a -Wl,--no-whole-archive $(LDLIBS)

build/tests/%.t: tests/c/%.c tests/c/tap.h lib/liboutlierlab.a
	@mkdir -p build/tests
	$(CC) $(CFLAGS) -Iengine -o $@ $< lib/liboutlierlab.a $(LDLIBS)

# One harness: prove runs C test binaries and Lua test files (through tests/exec.sh).
test: all test-deps ## every C and Lua test through prove; the last lines say PASS or FAIL
	$(if $(CTESTS),@flock build/.lock $(MAKE) --no-print-directory $(CTESTS))
	@t0=$$(date +%s); prove --exec 'sh tests/exec.sh' $(PROVE_FLAGS) $(CTESTS) $(LUATESTS); rc=$$?; \
	  echo "make test: suite wall time $$(( $$(date +%s) - t0 )) s (prove $(PROVE_FLAGS))"; exit $$rc

test-c: all test-deps ## the C tests only
	$(if $(CTESTS),@flock build/.lock $(MAKE) --no-print-directory $(CTESTS))
	prove --exec 'sh tests/exec.sh' $(CTESTS)

test-lua: all test-deps ## the Lua tests only
	prove --exec 'sh tests/exec.sh' $(LUATESTS)

bench: all build/bench/bench_matmul build/bench/bench_optim ## speed against this machine's own sgemm peak
	@echo "== engine matmul vs raw cblas_sgemm (threads: $${OMP_NUM_THREADS:-all}) =="
	build/bench/bench_matmul
	build/bench/bench_optim 3
	@for f in $(sort $(wildcard bench/*.lua)); do bin/outlierlab run $$f || exit 1; done

# Optional: the same shapes in PyTorch eager (Debian's python3-torch) right after the engine;
# prints engine / PyTorch tokens/s. Not part of make test; the project does not depend on it.
# (Debian's interpreter by default: a python3 earlier on PATH, e.g. pyenv's, lacks the package.
# PyTorch gets the same BLAS and OpenMP conditions as the engine: Debian's torch calls the
# libblas.so.3 alternative, by default OpenBLAS's pthread build, whose spinning threads fight
# torch's OpenMP threads (measured: the organism step 5.2 s instead of 0.08 s); so the OpenMP
# build is put first and the OpenMP wait is passive, as bin/outlierlab sets it.)
PEER_PYTHON ?= /usr/bin/python3
bench-peer: all ## the same shapes in PyTorch eager beside the engine (needs python3-torch)
	@$(PEER_PYTHON) -c 'import torch' 2>/dev/null || { echo "make bench-peer: $(PEER_PYTHON) has no torch (apt-get install python3-torch)"; exit 1; }
	bin/outlierlab run bench/peer/engine.lua --out=build/bench/peer.json
	LD_LIBRARY_PATH=$(BLAS_DIR) OMP_WAIT_POLICY=PASSIVE $(PEER_PYTHON) bench/peer/torch_peer.py build/bench/peer.json

build/bench/%: bench/%.c lib/liboutlierlab.a
	@mkdir -p build/bench
	$(CC) $(CFLAGS) -Iengine -o $@ $< lib/liboutlierlab.a $(LDLIBS)

clean: ## remove build/, lib/ and bin/ (results/ and cache/ stay)
	rm -rf build lib bin

# The help is read from the makefiles, so it cannot go stale: a rule line's `## text` is its
# line; a target written with variables starts its text with its name and a colon; % shows as
# <id>. tests/lua/test_make_help.lua checks that every .PHONY target has a line.
help: ## every target with one line (this list)
	@echo "make TARGET [VARIABLE=value …]; the targets (from the ## comments in Makefile and mk/*.mk):"
	@awk '/^[^#\t =][^=]*:([^=]|$$).*## / { t = $$0; sub(/:.*/, "", t); d = $$0; sub(/^[^#]*## /, "", d); \
	  if (t ~ /\$$/) { t = d; sub(/: .*/, "", t); sub(/^[^:]*: /, "", d) } gsub(/%/, "<id>", t); \
	  printf "  %-22s %s\n", t, d }' $(MAKEFILE_LIST)

-include mk/*.mk
