/*
 * fuzz_safetensors.c — the safetensors reader (engine/io_safetensors.c) on arbitrary bytes:
 * ol_st_open either refuses the file with a message naming it, or every tensor it lists can
 * be read (as f32 or i32 by dtype, or refused with a message naming the file), every name is
 * non-empty and every metadata key has a value.
 *   make fuzz FUZZ_TARGETS=safetensors      seeds: tests/hostile/safetensors, tests/fuzz/corpus/safetensors
 */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    ol_st_file *f = ol_st_open(path);
    if (!f) { fuzz_check_error("ol_st_open", path); return 0; }
    int32_t n = ol_st_count(f);
    for (int32_t i = 0; i < n; i++) {
        const char *name = ol_st_name(f, i);
        if (!name || !*name || ol_st_find(f, name) != i) { fprintf(stderr, "tensor %d: bad or duplicate name\n", i); abort(); }
        int32_t dt, nd;
        int64_t shape[8], numel = 1;
        if (ol_st_info(f, i, &dt, &nd, shape) != 0 || nd < 0 || nd > 8) abort();
        for (int d = 0; d < nd; d++) numel *= shape[d];
        if (numel < 0 || numel > (int64_t)size) { fprintf(stderr, "tensor '%s': %lld elements in a %zu-byte file\n", name, (long long)numel, size); abort(); }
        void *buf = malloc((size_t)numel * 4 + 4);
        if (!buf) abort();
        int rc;
        if (dt == OL_ST_F32 || dt == OL_ST_F16 || dt == OL_ST_BF16 || dt == OL_ST_F64) rc = ol_st_read_f32(f, name, buf, numel);
        else rc = ol_st_read_i32(f, name, buf, numel);
        if (rc != 0) fuzz_check_error("read", path);
        free(buf);
    }
    for (int32_t i = 0; i < ol_st_metadata_count(f); i++) {
        const char *k = ol_st_metadata_key(f, i);
        if (!k || !ol_st_metadata(f, k)) abort();
    }
    ol_st_close(f);
    return 0;
}
