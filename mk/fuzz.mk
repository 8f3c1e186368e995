# mk/fuzz.mk — fuzzing the readers of untrusted input with libFuzzer (clang, from Debian):
#   make fuzz                      every target for FUZZ_SECONDS each (default 60), one at a time
#   make fuzz FUZZ_TARGETS=tokens FUZZ_SECONDS=600
# Targets (tests/fuzz/fuzz_<t>.c): safetensors (engine/io_safetensors.c), tokens
# (engine/io_tokens.c), llama2c (engine/io_llama2c.c: llama2.c checkpoints and tokenizer.bin),
# config (outlierlab.config's command line and outlierlab.util.json, in an embedded LuaJIT),
# modeldir (a model directory's config.json and tokenizer files: outlierlab.pretrained.hf.config
# and outlierlab.pretrained.tokenizers, in an embedded LuaJIT).
# Seeds: tests/hostile/<t>/ (the hostile corpus) and tests/fuzz/corpus/<t>/;
# what libFuzzer adds goes to build/fuzz/corpus/<t>/. A crash writes its input to
# tests/fuzz/crashes/<t>/ and fails the target: commit that file with the fix, and make test
# replays it for ever (tests/c/test_fuzz_replay.c, built with gcc, no clang needed).
# docs/reference/reliability.md says what is fuzzed and how long.
FUZZ_PKGS    := clang libclang-rt-14-dev
FUZZ_CC      ?= clang
FUZZ_TARGETS ?= safetensors tokens config llama2c modeldir
FUZZ_SECONDS ?= 60
FUZZ_FLAGS   := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                -std=c11 -Iengine $(shell pkg-config --cflags luajit libcjson 2>/dev/null)
# the readers under test are compiled with coverage; the rest of the engine comes from the
# ordinary static library
FUZZ_IO_OBJ  := build/fuzz/io_safetensors.o build/fuzz/io_tokens.o build/fuzz/io_llama2c.o
.SECONDARY: $(FUZZ_IO_OBJ)

.PHONY: fuzz fuzz-deps fuzz-build
fuzz-deps: ## install clang and its libFuzzer runtime (as root), or print the command
	$(call apt_install,$(FUZZ_PKGS))

build/fuzz/%.o: engine/%.c $(HEADERS)
	@mkdir -p build/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h tests/fuzz/fuzz_lua.h $(FUZZ_IO_OBJ) lib/liboutlierlab.a
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_IO_OBJ) lib/liboutlierlab.a $(LDLIBS)

fuzz-build: all fuzz-deps ## build the fuzz targets
	@flock build/.lock $(MAKE) --no-print-directory $(addprefix build/fuzz/fuzz_,$(FUZZ_TARGETS))

# One target at a time (a shared 2-core machine): each runs FUZZ_SECONDS in one process.
fuzz: fuzz-build ## libFuzzer on the file and settings readers, FUZZ_SECONDS each
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus/$$t tests/fuzz/crashes/$$t; \
	  echo "== fuzz $$t for $(FUZZ_SECONDS) s"; \
	  seeds="tests/fuzz/corpus/$$t"; [ -d tests/hostile/$$t ] && seeds="$$seeds tests/hostile/$$t"; \
	  ASAN_OPTIONS=detect_leaks=0 OUTLIERLAB_ROOT=$(CURDIR) build/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) \
	    -print_final_stats=1 -artifact_prefix=tests/fuzz/crashes/$$t/ build/fuzz/corpus/$$t $$seeds \
	    2>&1 | tee build/fuzz/$$t.log | grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|stat::number_of_executed_units|ERROR|SUMMARY"; \
	  [ $${PIPESTATUS[0]} -eq 0 ] || { echo "fuzz $$t: failed, input in tests/fuzz/crashes/$$t/ (log build/fuzz/$$t.log)"; exit 1; }; \
	done

# make test's replay of the corpus is rebuilt when a harness changes
build/tests/test_fuzz_replay.t: $(wildcard tests/fuzz/*.[ch])
