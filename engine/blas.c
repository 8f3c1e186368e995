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

/* ------------------------------------------------------------------ deterministic sgemm
 * OpenBLAS's threaded sgemm does not round the same with 1, 2 or 4 threads for some kernel
 * sets (the Haswell kernels, which this machine's environment selects: every product shape
 * the models use differed between 1 and 2 threads; the SkylakeX kernels happened to agree).
 * So the engine never lets OpenBLAS split a product: ol__sgemm cuts it into work items that
 * depend only on the shape (row or column tiles of C, and for a small C with a long inner
 * dim, fixed chunks of K whose partial products are added in chunk order), runs the items
 * over the engine's OpenMP threads, and each item is a single-threaded sgemm (OpenBLAS's
 * OpenMP build runs single-threaded inside an active parallel region). The same items give
 * the same bits whatever the thread count. */
#include <cblas.h>
#include <stdlib.h>
#include <omp.h>
#include <stdatomic.h>

#define GEMM_TILE 256      /* rows (or columns) of C per tile when that dim exceeds it */
#define GEMM_KCHUNK 512    /* inner-dim chunk when C has few tiles */
#define GEMM_KMAX 16       /* at most this many K chunks */
#define GEMM_TILES_MAX 32  /* at most this many tiles (a wide C: fewer repacks of the other operand) */

/* One single-threaded (inside a parallel region) row-major cblas_sgemm. With beta = 0,
 * OpenBLAS zero-fills C one column of its column-major view (one row of ours) per memset
 * call and then adds the product to it; for the narrow products of small models those calls
 * cost more than the product's packing. Zeroing C here in one pass (per row only when the
 * rows are not contiguous) and adding with beta = 1 is the same arithmetic (+0 + product). */
void ol__sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc) {
    if (ol__gemm_fast(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc) == 0) return;
    if (beta == 0.0f && m > 0 && n > 0) {
        if (ldc == n) memset(C, 0, (size_t)m * (size_t)n * 4);
        else for (int r = 0; r < m; r++) memset(C + (int64_t)r * ldc, 0, (size_t)n * 4);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* One product cut into its work items (ol__gemm_prepare), run by ol__gemm_item; several
 * independent products may share one parallel region (ol__sgemm_batched2). slot: which of the
 * calling thread's two sets of scratch buffers (partial products, tile counters, Wᵀ copy) a
 * product uses, so that two prepared products do not share one. */
int ol__gemm_prepare(ol_gemm_task *g, int slot, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                     int64_t sa, const float *B, int64_t sb, float beta, float *C, int64_t sc, int64_t batch) {
    memset(g, 0, sizeof *g);
    if (M <= 0 || N <= 0 || batch <= 0) return 0;
    if (K <= 0) {
        for (int64_t i = 0; i < batch; i++)
            for (int64_t e = 0; e < M * N; e++) C[i * sc + e] = beta == 0.0f ? 0.0f : beta * C[i * sc + e];
        return 0;
    }
    /* tiles along the larger of M and N */
    int rows = M >= N;
    int64_t D = rows ? M : N;
    int64_t nt = D > GEMM_TILE + GEMM_TILE / 2 ? (D + GEMM_TILE - 1) / GEMM_TILE : 1;
    if (nt > GEMM_TILES_MAX) nt = GEMM_TILES_MAX;
    int64_t tile = (D + nt - 1) / nt;
    /* chunks of K when the output gives few items */
    int64_t nk = 1, kc = K;
    if (batch * nt < 4 && K >= 2 * GEMM_KCHUNK) {
        nk = (K + GEMM_KCHUNK - 1) / GEMM_KCHUNK;
        if (nk > GEMM_KMAX) nk = GEMM_KMAX;
        kc = (K + nk - 1) / nk;
        kc = (kc + 15) & ~(int64_t)15;
        nk = (K + kc - 1) / kc;
    }
    /* partial products and tile counters: grow-only buffers per calling thread and slot (a
     * malloc of this size per call would be an mmap, and its pages would fault in again on
     * every product) */
    static _Thread_local float *scratch[2];
    static _Thread_local int64_t scratch_n[2];
    static _Thread_local _Atomic int32_t *done_buf[2];
    static _Thread_local int64_t done_n[2];
    if (nk > 1) {
        int64_t need = (nk - 1) * batch * M * N;
        if (need > scratch_n[slot]) {
            float *p = realloc(scratch[slot], (size_t)need * sizeof *p);
            if (!p) OL_FAIL_INT("sgemm: out of memory for %lld partial products of (%lld, %lld)",
                                (long long)(nk - 1), (long long)M, (long long)N);
            scratch[slot] = p;
            scratch_n[slot] = need;
        }
        if (batch * nt > done_n[slot]) {
            _Atomic int32_t *d = realloc((void *)done_buf[slot], (size_t)(batch * nt) * sizeof *d);
            if (!d) OL_FAIL_INT("sgemm: out of memory for %lld tile counters", (long long)(batch * nt));
            done_buf[slot] = d;
            done_n[slot] = batch * nt;
        }
        g->part = scratch[slot];
        g->done = done_buf[slot];
        for (int64_t i = 0; i < batch * nt; i++) atomic_store_explicit(&g->done[i], 0, memory_order_relaxed);
    }
    *g = (ol_gemm_task){ ta, tb, rows, M, N, K, A, sa, B, sb, beta, C, sc, batch, D, nt, tile, nk, kc, g->part,
                         g->done, NULL, batch * nt * nk, 0 };
    /* row tiles of x·Wᵀ: the engine kernel's copy of Wᵀ made once for all of them (gemm.c) */
    if (tb && rows && batch == 1 && nk == 1 && nt > 1)
        g->bt = ol__gemm_fast_bt_prepare(slot, ta, (int)tile, (int)(D - (nt - 1) * tile), (int)N, (int)K, B, (int)K);
    /* does the engine kernel serve every item? (each tile and K-chunk shape; a new shape is
     * calibrated here, on the calling thread) */
    g->fast = 1;
    int64_t dims[2] = { tile, D - (nt - 1) * tile }, ks[2] = { kc, K - (nk - 1) * kc };
    for (int a = 0; a < 2 && g->fast; a++)
        for (int b = 0; b < 2 && g->fast; b++) {
            int64_t m = rows ? dims[a] : M, n = rows ? N : dims[a];
            g->fast = ol__gemm_fast_serves(ta, tb, (int)m, (int)n, (int)ks[b], 1.0f, b == 0 ? beta : 0.0f);
        }
    return 0;
}

void ol__gemm_item(const ol_gemm_task *g, int64_t it) {
    int ta = g->ta, tb = g->tb;
    int64_t M = g->M, N = g->N, K = g->K, nt = g->nt, nk = g->nk, tile = g->tile, kc = g->kc, D = g->D;
    int lda = ta ? (int)M : (int)K, ldb = tb ? (int)K : (int)N;
    int64_t bi = it / (nt * nk), t = (it / nk) % nt, k = it % nk;
    int64_t lo = t * tile, n_ = D - lo < tile ? D - lo : tile;
    int64_t k0 = k * kc, kn = K - k0 < kc ? K - k0 : kc;
    int64_t i0 = g->rows ? lo : 0, j0 = g->rows ? 0 : lo, m = g->rows ? n_ : M, n = g->rows ? N : n_;
    /* op(A) rows i0.., inner k0..; op(B) inner k0.., columns j0.. */
    const float *a = g->A + bi * g->sa + (ta ? k0 * M + i0 : i0 * K + k0);
    const float *b = g->B + bi * g->sb + (tb ? j0 * K + k0 : k0 * N + j0);
    float *c = k == 0 ? g->C + bi * g->sc + i0 * N + j0 : g->part + ((k - 1) * g->batch + bi) * M * N + i0 * N + j0;
    if (!g->bt || ol__gemm_fast_bt(ta, (int)m, (int)n, (int)kn, 1.0f, a, lda, b, ldb, g->bt, g->beta, c, (int)N) != 0)
        ol__sgemm(ta, tb, (int)m, (int)n, (int)kn, 1.0f, a, lda, b, ldb, k == 0 ? g->beta : 0.0f, c, (int)N);
    /* the tile's last chunk to finish adds the partial products to C, in chunk order */
    if (nk > 1 && atomic_fetch_add_explicit(&g->done[bi * nt + t], 1, memory_order_acq_rel) == nk - 1) {
        int64_t total = g->batch * M * N;
        for (int64_t i = i0; i < i0 + m; i++) {
            float *crow = g->C + bi * g->sc + i * N;
            const float *prow = g->part + bi * M * N + i * N;
            for (int64_t j = j0; j < j0 + n; j++) {
                float s = crow[j];
                for (int64_t q = 1; q < nk; q++) s += prow[(q - 1) * total + j];
                crow[j] = s;
            }
        }
    }
}

/* the items of one or two products over the engine's threads (pool.c) */
typedef struct { const ol_gemm_task *g1, *g2; } gemm_pair;
static void pair_item(void *arg, int64_t it, int tid) {
    const gemm_pair *p = arg;
    (void)tid;
    if (it < p->g1->items) ol__gemm_item(p->g1, it);
    else ol__gemm_item(p->g2, it - p->g1->items);
}

/* The engine's worker threads (pool.c) when no item calls OpenBLAS (its OpenMP build must not
 * be entered from threads it does not know, concurrently); OpenMP threads otherwise. */
static void run_items(const gemm_pair *p) {
    int64_t n = p->g1->items + p->g2->items;
    if ((p->g1->fast || !p->g1->items) && (p->g2->fast || !p->g2->items)) {
        ol__par(n, pair_item, (void *)p);
        return;
    }
    #pragma omp parallel for schedule(dynamic, 1)
    for (int64_t it = 0; it < n; it++) pair_item((void *)p, it, 0);
}

int ol__sgemm_batched(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t sa,
                      const float *B, int64_t sb, float beta, float *C, int64_t sc, int64_t batch) {
    ol_gemm_task g, none;
    if (ol__gemm_prepare(&g, 0, ta, tb, M, N, K, A, sa, B, sb, beta, C, sc, batch) != 0) return -1;
    memset(&none, 0, sizeof none);
    gemm_pair p = { &g, &none };
    run_items(&p);
    return 0;
}

/* two independent products (no operand of one is written by the other) in one job */
int ol__sgemm_batched2(const ol_gemm_task *g1, const ol_gemm_task *g2) {
    gemm_pair p = { g1, g2 };
    run_items(&p);
    return 0;
}
