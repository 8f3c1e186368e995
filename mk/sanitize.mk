# mk/sanitize.mk — make check-sanitize: the engine and bin/outlierlab built with AddressSanitizer
# and UndefinedBehaviorSanitizer (gcc; the first report stops the program), then the whole test
# suite run against them. The build and its test tree live in build/sanitize/, a root of its
# own (bin/, lib/, build/tests/ and a fresh copy of lua/, tests/, experiments/, …), so the
# ordinary build is untouched and the tests that start bin/outlierlab start the sanitized one.
SAN_DIR   := build/sanitize
SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
SAN_CFLAGS = $(filter-out -O3,$(CFLAGS)) $(SAN_FLAGS)
SAN_OBJ   := $(patsubst engine/%.c,$(SAN_DIR)/obj/%.o,$(ENGINE_SRC))
SAN_CTESTS := $(patsubst tests/c/%.c,$(SAN_DIR)/build/tests/%.t,$(wildcard tests/c/*.c))
# a copy, not links: some tests copy or edit the tree they run in; SAN_TOP are the top-level
# names the copy replaces (removed whole, so nothing is ever removed through a link)
SAN_COPY  := $(wildcard lua engine tests experiments plots examples docs bench scripts mk .ci data/README.md \
               README.md Makefile Containerfile .dockerignore)
SAN_TOP   := $(sort $(foreach f,$(SAN_COPY),$(firstword $(subst /, ,$(f)))))
# LuaJIT, Open MPI and OpenBLAS are not ours and keep memory to the end: leaks are not reported
SAN_ENV   := ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.PHONY: check-sanitize sanitize-build
$(SAN_DIR)/obj/%.o: engine/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -c $< -o $@

$(SAN_DIR)/lib/liboutlierlab.a: $(SAN_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(SAN_DIR)/bin/outlierlab: engine/host/main.c $(SAN_DIR)/lib/liboutlierlab.a
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -o $@ $< -Wl,-E -Wl,--whole-archive $(SAN_DIR)/lib/liboutlierlab.a -Wl,--no-whole-archive $(LDLIBS)

$(SAN_DIR)/build/tests/%.t: tests/c/%.c tests/c/tap.h $(wildcard tests/fuzz/*.[ch]) $(SAN_DIR)/lib/liboutlierlab.a
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) -Iengine -o $@ $< $(SAN_DIR)/lib/liboutlierlab.a $(LDLIBS)

sanitize-build: all ## the engine and the tests built with ASan and UBSan in build/sanitize/
	@flock build/.lock $(MAKE) --no-print-directory $(SAN_DIR)/bin/outlierlab $(SAN_CTESTS)
	@cd $(SAN_DIR) && rm -rf $(SAN_TOP)
	@set -o pipefail; tar -cf - $(SAN_COPY) | tar -xf - -C $(SAN_DIR)

check-sanitize: sanitize-build test-deps ## every test against the ASan + UBSan build
	cd $(SAN_DIR) && $(SAN_ENV) prove --exec 'sh tests/exec.sh' $(PROVE_FLAGS) \
	  $(patsubst $(SAN_DIR)/%,%,$(SAN_CTESTS)) $(LUATESTS)
