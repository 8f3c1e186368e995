/*
 * test_libm_exact.c — engine/libm_exact.c's erff and expf against the libm they replicate, bit
 * for bit: every float of the ranges GELU's erf form uses (|x| in [2^-6, 16) for erff, the
 * argument −x²/2 of its derivative in (−128, −2^-12] for expf), the neighbours of every
 * boundary between libm's approximations and special cases, and a stride over all 2^32 bit
 * patterns (NaN equal to NaN). Both the vector loops (ol__erff_n, ol__expf_n) and the scalar
 * forms (ol__erff1, ol__expf1) are checked. A machine whose libm computes these functions
 * otherwise (another glibc, a CPU without FMA, where glibc picks its SSE2 expf) fails here
 * and says which; the engine's numbers then follow the replica, not that libm. (On a CPU
 * without FMA or AVX2 glibc uses its SSE2 expf: the test says so and skips.)
 * All 2^32 inputs were compared once by hand (0 mismatches for both: docs/journal).
 */
#include "tap.h"
#include "outlierlab.h"
#include "internal.h"
#include <stdlib.h>
#include <string.h>

enum { B = 4096 };
static float xs[B], yv[B];
static uint64_t checked, bad_vec, bad_scalar;
static char first[256];

static uint32_t bits_of(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }
static float from_bits(uint32_t b) { float x; memcpy(&x, &b, 4); return x; }
static int same(float a, float b) { return bits_of(a) == bits_of(b) || (a != a && b != b); }

/* compare a block of n inputs in xs */
static void run_block(int which, int n) {
    if (which == 0) ol__erff_n(xs, yv, n); else ol__expf_n(xs, yv, n);
    for (int i = 0; i < n; i++) {
        float ref = which == 0 ? erff(xs[i]) : expf(xs[i]);
        float sc = which == 0 ? ol__erff1(xs[i]) : ol__expf1(xs[i]);
        checked++;
        if (!same(ref, yv[i]) && bad_vec++ == 0)
            snprintf(first, sizeof first, "%s(%a) (bits %08x): libm %a, vector loop %a",
                     which ? "expf" : "erff", xs[i], bits_of(xs[i]), ref, yv[i]);
        if (!same(ref, sc) && bad_scalar++ == 0 && !first[0])
            snprintf(first, sizeof first, "%s(%a): libm %a, scalar %a", which ? "expf" : "erff", xs[i], ref, sc);
    }
}

/* every bit pattern in [lo, hi) with the given step, in blocks (odd block lengths too) */
static void run_range(int which, uint32_t lo, uint32_t hi, uint32_t step) {
    int n = 0;
    for (uint64_t u = lo; u < hi; u += step) {
        xs[n++] = from_bits((uint32_t)u);
        if (n == B - 3) { run_block(which, n); n = 0; }
    }
    if (n) run_block(which, n);
}

static void report(const char *what) {
    char name[256];
    snprintf(name, sizeof name, "%s: %llu inputs, the vector loop and the scalar form equal libm bit for bit",
             what, (unsigned long long)checked);
    ok(bad_vec == 0 && bad_scalar == 0, name);
    if (first[0]) printf("# %llu vector and %llu scalar mismatches; first: %s\n",
                         (unsigned long long)bad_vec, (unsigned long long)bad_scalar, first);
    checked = bad_vec = bad_scalar = 0;
    first[0] = 0;
}

int main(void) {
    /* glibc runs its FMA build of expf only where the CPU has FMA and AVX2; elsewhere libm's
     * own bits differ from the replica's (which stay the same), so there is nothing to compare */
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("fma") || !__builtin_cpu_supports("avx2")) {
        printf("1..0 # SKIP this CPU lacks FMA or AVX2: libm uses its SSE2 expf, not the one replicated\n");
        return 0;
    }
    /* erff: all of |x| in [2^-6, 16), both signs */
    run_range(0, 0x3c800000u, 0x41800000u, 1);
    run_range(0, 0xbc800000u, 0xc1800000u, 1);
    report("erff on every float with 2^-6 <= |x| < 16");
    /* the boundaries of fdlibm's regions and the special cases, ±4096 patterns, both signs */
    static const uint32_t edges[] = { 0x04000000u, 0x31800000u, 0x3f580000u, 0x3fa00000u,
                                      0x4036db6eu, 0x40c00000u, 0x7f800000u };
    for (size_t e = 0; e < sizeof edges / sizeof *edges; e++)
        for (uint32_t s = 0; s < 2; s++) {
            uint32_t c = edges[e] | (s << 31);
            run_range(0, c - 4096, c + (edges[e] == 0x7f800000u ? 4096 * 1024 : 4096), 1);
        }
    run_range(0, 0, 64, 1);                          /* ±0 and the smallest subnormals */
    run_range(0, 0x80000000u, 0x80000040u, 1);
    report("erff near every boundary of its approximations");
    run_range(0, 0, 0xffffffffu, 251);
    report("erff on every 251st bit pattern");

    /* expf: −x²/2 for |x| up to 16 and beyond the underflow bounds */
    run_range(1, 0xb9800000u, 0xc3000000u, 1);
    report("expf on every float in (-128, -2^-12]");
    static const float eedges[] = { -0x1.9d1d9ep+6f, -0x1.9fe368p+6f, 0x1.62e42ep+6f, 88.0f, -88.0f };
    for (size_t e = 0; e < sizeof eedges / sizeof *eedges; e++)
        run_range(1, bits_of(eedges[e]) - 4096, bits_of(eedges[e]) + 4096, 1);
    run_range(1, 0x7f7ff000u, 0x7fc01000u, 1);       /* the largest floats, inf, NaNs */
    run_range(1, 0xff7ff000u, 0xffc01000u, 1);
    report("expf near its bounds, at ±inf and NaN");
    run_range(1, 0, 0xffffffffu, 251);
    report("expf on every 251st bit pattern");
    return tap_done();
}
