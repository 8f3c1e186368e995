/*
 * io_hf.c — the numeric side of reading and writing Hugging Face model directories
 * (lua/outlierlab/pretrained/hf.lua does the names, shapes and config): dtype conversion between
 * the checkpoint's F32/F16/BF16/F64 and the engine's fp32, the transposed and sliced copies
 * that GPT-2's Conv1D weights and fused c_attn need, embedding rows gathered straight from a
 * mapped table, and handing mapped pages back to the kernel once a layer has been converted
 * (lua/outlierlab/pretrained/stream.lua runs models larger than memory this way).
 *
 * Sources are raw little-endian tensor bytes, typically the memory map of a safetensors file
 * (ol_st_data). Conversions are exact where the target can hold the value (F16 and BF16 ->
 * F32); F32 -> F16/BF16 rounds to nearest, ties to even (as PyTorch's .to(torch.bfloat16)),
 * with overflow to ±inf and NaN kept NaN. Loops run over OpenMP threads on disjoint ranges:
 * the result does not depend on the thread count.
 */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int elem_size(int32_t dt) {
    switch (dt) {
    case OL_ST_F32: return 4;
    case OL_ST_F16: case OL_ST_BF16: return 2;
    case OL_ST_F64: return 8;
    default: return 0;
    }
}

/* IEEE binary16 -> binary32 (exact) */
static inline float f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        if (m == 0) bits = s;
        else {  /* subnormal: normalise */
            int k = -1;
            do { k++; m <<= 1; } while (!(m & 0x400));
            bits = s | ((uint32_t)(127 - 15 - k) << 23) | ((m & 0x3ff) << 13);
        }
    } else if (e == 31) bits = s | 0x7f800000u | (m << 13);
    else bits = s | ((e + 127 - 15) << 23) | (m << 13);
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

/* binary32 -> bfloat16, round to nearest even; NaN stays a (quiet) NaN */
static inline uint16_t f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* binary32 -> binary16, round to nearest even, overflow to inf, subnormals kept */
static inline uint16_t f32_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);            /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u);            /* >= 65520: rounds to inf */
    if (a < 0x38800000u) {                                           /* below 2^-14: subnormal or 0 */
        if (a < 0x33000000u) return (uint16_t)s;                      /* < 2^-25: rounds to 0 */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        int shift = (int)(126 - e);                                  /* 14 .. 24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(s | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1);                       /* round the 13 dropped bits */
    return (uint16_t)(s | ((r - 0x38000000u) >> 13));
}

static inline float load_one(const unsigned char *p, int32_t dt) {
    switch (dt) {
    case OL_ST_F32: { float v; memcpy(&v, p, 4); return v; }
    case OL_ST_F16: { uint16_t h; memcpy(&h, p, 2); return f16_to_f32(h); }
    case OL_ST_BF16: { uint16_t h; memcpy(&h, p, 2); return bf16_to_f32(h); }
    default: { double v; memcpy(&v, p, 8); return (float)v; }
    }
}

int ol_hf_to_f32(const void *src, int32_t dtype, int64_t n, float *dst) {
    int es = elem_size(dtype);
    if (!es) OL_FAIL_INT("hf: cannot convert %s to f32 (F32, F16, BF16 and F64 are supported)", ol_st_dtype_name(dtype));
    if (n < 0 || (n > 0 && (!src || !dst))) OL_FAIL_INT("hf: to_f32: bad arguments (n = %lld)", (long long)n);
    const unsigned char *s = src;
    if (dtype == OL_ST_F32) {
        #pragma omp parallel for schedule(static) if (n > (1 << 20))
        for (int64_t c = 0; c < (n + 65535) / 65536; c++) {
            int64_t a = c * 65536, b = a + 65536 < n ? a + 65536 : n;
            memcpy(dst + a, s + 4 * a, (size_t)(b - a) * 4);
        }
        return 0;
    }
    if (dtype == OL_ST_BF16) {
        const uint16_t *h = src;   /* safetensors data is 8-aligned at the area start; entries of 2-byte types are 2-aligned */
        if (((uintptr_t)h & 1) == 0) {
            #pragma omp parallel for schedule(static) if (n > (1 << 16))
            for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(h[i]);
            return 0;
        }
    }
    #pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; i++) dst[i] = load_one(s + (size_t)es * i, dtype);
    return 0;
}

int ol_hf_to_f32_t(const void *src, int32_t dtype, int64_t rows, int64_t cols, int64_t col0, int64_t ncols,
                   float *dst) {
    int es = elem_size(dtype);
    if (!es) OL_FAIL_INT("hf: cannot convert %s to f32 (F32, F16, BF16 and F64 are supported)", ol_st_dtype_name(dtype));
    if (rows < 0 || cols < 0 || col0 < 0 || ncols < 0 || col0 + ncols > cols)
        OL_FAIL_INT("hf: transposed copy: columns [%lld, %lld) outside a (%lld,%lld) matrix",
                    (long long)col0, (long long)(col0 + ncols), (long long)rows, (long long)cols);
    const unsigned char *s = src;
    /* dst (ncols, rows)[j][i] = src[i][col0 + j]; tiles of 64x64 keep both sides in cache */
    const int64_t TB = 64;
    int64_t nti = (rows + TB - 1) / TB, ntj = (ncols + TB - 1) / TB;
    #pragma omp parallel for schedule(static) if (rows * ncols > (1 << 16))
    for (int64_t t = 0; t < nti * ntj; t++) {
        int64_t i0 = (t / ntj) * TB, j0 = (t % ntj) * TB;
        int64_t i1 = i0 + TB < rows ? i0 + TB : rows, j1 = j0 + TB < ncols ? j0 + TB : ncols;
        for (int64_t i = i0; i < i1; i++)
            for (int64_t j = j0; j < j1; j++)
                dst[j * rows + i] = load_one(s + (size_t)es * (i * cols + col0 + j), dtype);
    }
    return 0;
}

int ol_hf_gather_rows(const void *src, int32_t dtype, int64_t nrows, int64_t ncols, const int32_t *ids,
                      int64_t n, float *dst) {
    int es = elem_size(dtype);
    if (!es) OL_FAIL_INT("hf: cannot convert %s to f32 (F32, F16, BF16 and F64 are supported)", ol_st_dtype_name(dtype));
    for (int64_t r = 0; r < n; r++)
        if (ids[r] < 0 || ids[r] >= nrows)
            OL_FAIL_INT("hf: embedding: id %d at position %lld outside [0, %lld)", ids[r], (long long)r, (long long)nrows);
    const unsigned char *s = src;
    #pragma omp parallel for schedule(static) if (n * ncols > (1 << 16))
    for (int64_t r = 0; r < n; r++) {
        const unsigned char *row = s + (size_t)es * ((int64_t)ids[r] * ncols);
        for (int64_t j = 0; j < ncols; j++) dst[r * ncols + j] = load_one(row + (size_t)es * j, dtype);
    }
    return 0;
}

int ol_hf_from_f32(const float *src, int64_t n, int32_t dtype, void *dst) {
    if (n < 0 || (n > 0 && (!src || !dst))) OL_FAIL_INT("hf: from_f32: bad arguments (n = %lld)", (long long)n);
    switch (dtype) {
    case OL_ST_F32: memcpy(dst, src, (size_t)n * 4); return 0;
    case OL_ST_BF16: {
        uint16_t *d = dst;
        #pragma omp parallel for schedule(static) if (n > (1 << 16))
        for (int64_t i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
        return 0;
    }
    case OL_ST_F16: {
        uint16_t *d = dst;
        #pragma omp parallel for schedule(static) if (n > (1 << 16))
        for (int64_t i = 0; i < n; i++) d[i] = f32_to_f16(src[i]);
        return 0;
    }
    default:
        OL_FAIL_INT("hf: cannot write %s (F32, F16 and BF16 are supported)", ol_st_dtype_name(dtype));
    }
}

int ol_hf_release(const void *ptr, int64_t nbytes) {
    if (!ptr || nbytes <= 0) return 0;
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)ptr, b = a + (uintptr_t)nbytes;
    a = (a + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);   /* whole pages inside the range only */
    b &= ~((uintptr_t)pg - 1);
    if (b <= a) return 0;
    if (madvise((void *)a, b - a, MADV_DONTNEED) != 0)
        OL_FAIL_INT("hf: madvise(DONTNEED) of %lld bytes failed: %s", (long long)(b - a), strerror(errno));
    return 0;
}

/* ------------------------------------------------------------------ checks and content keys */

int64_t ol_hf_first_nonfinite(const void *src, int32_t dtype, int64_t n) {
    int es = elem_size(dtype);
    if (!es) OL_FAIL_INT("hf: cannot check %s values (F32, F16, BF16 and F64 are supported)", ol_st_dtype_name(dtype));
    if (n < 0 || (n > 0 && !src)) OL_FAIL_INT("hf: first_nonfinite: bad arguments (n = %lld)", (long long)n);
    const unsigned char *s = src;
    int64_t first = n;
    const int64_t CH = 1 << 16;
    int64_t nch = (n + CH - 1) / CH;
    #pragma omp parallel for schedule(static) reduction(min:first) if (n > (1 << 20))
    for (int64_t c = 0; c < nch; c++) {
        int64_t a = c * CH, b = a + CH < n ? a + CH : n;
        for (int64_t i = a; i < b; i++) {
            const unsigned char *p = s + (size_t)es * i;
            int bad;
            switch (dtype) {
            case OL_ST_F32: { uint32_t u; memcpy(&u, p, 4); bad = (u & 0x7f800000u) == 0x7f800000u; break; }
            case OL_ST_F16: { uint16_t h; memcpy(&h, p, 2); bad = (h & 0x7c00u) == 0x7c00u; break; }
            case OL_ST_BF16: { uint16_t h; memcpy(&h, p, 2); bad = (h & 0x7f80u) == 0x7f80u; break; }
            default: { uint64_t u; memcpy(&u, p, 8); bad = (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull; break; }
            }
            if (bad) { if (i < first) first = i; break; }
        }
    }
    return first < n ? first : -1;
}

/* XXH64 (Yann Collet's xxHash, 64-bit variant, seed 0) over a file read in 4 MB blocks: every
 * byte of the file enters the hash, at memory or disk speed (several GB/s from the page cache). */
#define XP1 0x9E3779B185EBCA87ull
#define XP2 0xC2B2AE3D27D4EB4Full
#define XP3 0x165667B19E3779F9ull
#define XP4 0x85EBCA77C2B2AE63ull
#define XP5 0x27D4EB2F165667C5ull
static inline uint64_t xrotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t xround(uint64_t acc, uint64_t in) { acc += in * XP2; acc = xrotl(acc, 31); return acc * XP1; }
static inline uint64_t xmerge(uint64_t acc, uint64_t v) { v = xround(0, v); acc ^= v; return acc * XP1 + XP4; }
static inline uint64_t rd64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline uint32_t rd32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }

int ol_hf_hash_file(const char *path, uint64_t *out) {
    if (!path || !out) OL_FAIL_INT("hf: hash_file: bad arguments");
    FILE *f = fopen(path, "rb");
    if (!f) OL_FAIL_INT("hf: cannot read %s to hash it: %s", path, strerror(errno));
    const size_t BS = (size_t)4 << 20;
    unsigned char *buf = malloc(BS);
    if (!buf) { fclose(f); OL_FAIL_INT("hf: hash_file: out of memory"); }
    uint64_t v1 = XP1 + XP2, v2 = XP2, v3 = 0, v4 = (uint64_t)0 - XP1, total = 0;
    size_t have = 0;   /* bytes in buf not yet hashed (< 32 after each pass) */
    for (;;) {
        size_t got = fread(buf + have, 1, BS - have, f);
        if (got == 0) {
            if (ferror(f)) { int e = errno; free(buf); fclose(f); OL_FAIL_INT("hf: reading %s failed: %s", path, strerror(e)); }
            break;
        }
        total += got;
        have += got;
        size_t i = 0;
        for (; i + 32 <= have; i += 32) {
            v1 = xround(v1, rd64(buf + i)); v2 = xround(v2, rd64(buf + i + 8));
            v3 = xround(v3, rd64(buf + i + 16)); v4 = xround(v4, rd64(buf + i + 24));
        }
        memmove(buf, buf + i, have - i);
        have -= i;
    }
    fclose(f);
    uint64_t h;
    if (total >= 32) {
        h = xrotl(v1, 1) + xrotl(v2, 7) + xrotl(v3, 12) + xrotl(v4, 18);
        h = xmerge(h, v1); h = xmerge(h, v2); h = xmerge(h, v3); h = xmerge(h, v4);
    } else h = XP5;
    h += total;
    const unsigned char *p = buf, *e = buf + have;
    for (; p + 8 <= e; p += 8) { h ^= xround(0, rd64(p)); h = xrotl(h, 27) * XP1 + XP4; }
    if (p + 4 <= e) { h ^= (uint64_t)rd32(p) * XP1; h = xrotl(h, 23) * XP2 + XP3; p += 4; }
    for (; p < e; p++) { h ^= (uint64_t)(*p) * XP5; h = xrotl(h, 11) * XP1; }
    h ^= h >> 33; h *= XP2; h ^= h >> 29; h *= XP3; h ^= h >> 32;
    free(buf);
    *out = h;
    return 0;
}
