/*
 * fuzz_tokens.c — the token-file reader (engine/io_tokens.c) on arbitrary bytes, in each of
 * its formats (auto-detection, raw uint16, llm.c): a file is refused with a message naming
 * it, or every token can be copied (or refused the same way), and the count fits the size.
 *   make fuzz FUZZ_TARGETS=tokens           seeds: tests/hostile/tokens, tests/fuzz/corpus/tokens
 */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    const int32_t formats[3] = { OL_TOK_AUTO, OL_TOK_RAW16, OL_TOK_LLMC };
    for (int k = 0; k < 3; k++) {
        ol_token_file *f = ol_tokens_open(path, formats[k]);
        if (!f) { fuzz_check_error("ol_tokens_open", path); continue; }
        int64_t n = ol_tokens_count(f);
        int32_t w = ol_tokens_width(f);
        if (n < 1 || (w != 2 && w != 4) || n * w > (int64_t)size) {
            fprintf(stderr, "%lld tokens of %d bytes in a %zu-byte file\n", (long long)n, w, size);
            abort();
        }
        if (ol_tokens_max(f) < 0) abort();
        int32_t *buf = malloc((size_t)n * 4);
        if (!buf) abort();
        if (ol_tokens_copy_i32(f, 0, n, buf) != 0) fuzz_check_error("copy", path);
        if (ol_tokens_copy_i32(f, n, 1, buf) == 0) { fprintf(stderr, "a window past the end was copied\n"); abort(); }
        ol_clear_error();
        free(buf);
        ol_tokens_close(f);
    }
    return 0;
}
