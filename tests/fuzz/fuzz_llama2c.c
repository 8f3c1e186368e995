/*
 * fuzz_llama2c.c — llama2.c's readers (engine/io_llama2c.c) on arbitrary bytes: the checkpoint
 * (versions 0, 1, 2) and the tokenizer (tokenizer.bin, as many pieces as the file holds, and a
 * vocab_size from the first byte). A file is refused with a message naming it, or every tensor of
 * every layer reads (or is refused the same way: a non-finite weight) and the sizes fit the file;
 * every piece of an accepted tokenizer is within 1 .. max_token_length.
 *   make fuzz FUZZ_TARGETS=llama2c          seeds: tests/hostile/llama2c, tests/fuzz/corpus/llama2c
 */
#include "fuzz_common.h"

static void fuzz_llama2c_model(const char *path, size_t size) {
    ol_l2c_file *f = ol_l2c_open(path);
    if (!f) { fuzz_check_error("ol_l2c_open", path); return; }
    int32_t h[OL_L2C_NHEADER];
    if (ol_l2c_header(f, h) != 0) abort();
    int64_t total = 0;
    for (int32_t w = 0; w < OL_L2C_NTENSORS; w++) {
        int64_t n = ol_l2c_numel(f, w);
        int layered = w != OL_L2C_TOK && w != OL_L2C_RMS_FINAL && w != OL_L2C_WCLS;
        int64_t L = layered ? h[3] : 1;
        if (n < 1) { fprintf(stderr, "tensor %d has %lld values\n", w, (long long)n); abort(); }
        if (!(w == OL_L2C_WCLS && h[8])) total += n * L;
        /* a stored value takes a byte at least (version 2's int8): more values than bytes is a lie */
        if (n * L > (int64_t)size) { fprintf(stderr, "%s: %lld values in a %zu-byte file\n", ol_l2c_tensor_name(w), (long long)(n * L), size); abort(); }
        float *buf = malloc((size_t)n * sizeof *buf);
        if (!buf) abort();
        for (int32_t l = 0; l < L; l++)
            if (ol_l2c_read(f, w, l, buf) != 0) fuzz_check_error("ol_l2c_read", path);
        if (ol_l2c_read(f, w, (int32_t)L, buf) == 0) { fprintf(stderr, "a layer past the last was read\n"); abort(); }
        ol_clear_error();
        free(buf);
    }
    if (total > (int64_t)size) { fprintf(stderr, "%lld values in a %zu-byte file\n", (long long)total, size); abort(); }
    ol_l2c_close(f);
}

static void fuzz_llama2c_tok(const char *path, int32_t vocab) {
    ol_l2c_tok *t = ol_l2c_tok_open(path, vocab);
    if (!t) { fuzz_check_error("ol_l2c_tok_open", path); return; }
    int32_t n = ol_l2c_tok_count(t), max = ol_l2c_tok_max_len(t);
    if (n < 1 || (vocab > 0 && n != vocab) || max < 1) abort();
    for (int32_t i = 0; i < n; i++) {
        int32_t len;
        float score;
        const char *p = ol_l2c_tok_piece(t, i, &len, &score);
        if (!p || len < 1 || len > max || p[len] != 0 || score != score) { fprintf(stderr, "piece %d: bad\n", i); abort(); }
    }
    if (ol_l2c_tok_piece(t, n, NULL, NULL) != NULL) abort();
    ol_clear_error();
    ol_l2c_tok_close(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    fuzz_llama2c_model(path, size);
    fuzz_llama2c_tok(path, 0);
    fuzz_llama2c_tok(path, size > 0 ? 1 + data[0] % 16 : 3);
    return 0;
}
