/*
 * blas.c — which OpenBLAS kernels run, and a better choice where OpenBLAS guesses wrong.
 *
 * Debian's OpenBLAS is built for every x86-64 core type and picks one when it loads, from
 * the CPU's family/model numbers. A CPU model it does not know (a newer Xeon, or the generic
 * "Intel Xeon Processor" many virtual machines report) falls back to the oldest kernels
 * (Prescott: SSE3), although the CPU has AVX2 or AVX-512: measured on such a 2-core VM, a
 * (4096×768)·(768×3072) sgemm ran at 58 GFLOP/s with Prescott and 290 GFLOP/s with the
 * SkylakeX kernels, a small-model training step 2.7× faster. OpenBLAS reads its choice
 * once, at load time, from $OPENBLAS_CORETYPE; so a program calls ol_blas_core_hint() first
 * thing in main() and, when it returns a name, sets that variable and re-executes itself
 * (engine/host/main.c, bench/bench_matmul.c). The user's own $OPENBLAS_CORETYPE always wins.
 */
#include "internal.h"
#include <stdlib.h>
#include <string.h>

extern char *openblas_get_corename(void);
extern char *openblas_get_config(void);

const char *ol_blas_core(void) { return openblas_get_corename(); }
const char *ol_blas_config(void) { return openblas_get_config(); }

/* The kernels OpenBLAS should use on this CPU when its own detection fell back to older
 * ones, or NULL (detection fine, a user choice set, or not x86-64). */
const char *ol_blas_core_hint(void) {
#if defined(__x86_64__)
    if (getenv("OPENBLAS_CORETYPE")) return NULL;
    const char *core = openblas_get_corename();
    if (!core) return NULL;
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    /* core names OpenBLAS 0.3.x reports for pre-AVX2 kernels */
    static const char *old[] = { "Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                 "Katmai", "Coppermine", "Northwood", "Banias", "Sandybridge",
                                 "Barcelona", "Bobcat", "Bulldozer", "Piledriver", "Steamroller",
                                 "Excavator", "Opteron", "Opteron(SSE3)", "Athlon", "unknown", NULL };
    int is_old = 0;
    for (int i = 0; old[i]; i++) if (strcmp(core, old[i]) == 0) is_old = 1;
    if (avx512 && (is_old || strcmp(core, "Haswell") == 0 || strcmp(core, "Zen") == 0)) return "SkylakeX";
    if (avx2 && is_old) return "Haswell";
#endif
    return NULL;
}
