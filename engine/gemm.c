/*
 * gemm.c — the engine's own single-threaded sgemm for small products, with the rounding of
 * the OpenBLAS kernels it stands in for, bit for bit.
 *
 * Why. The default profiles train d = 64 models whose products (2048×64·64ᵀ, 64×64 over
 * 512-row chunks, …) are too small for OpenBLAS to reach its speed: every call packs both
 * operands, and the kernels this machine's environment selects (OPENBLAS_CORETYPE=Haswell)
 * use 8-wide vectors on a CPU with 16-wide FMA units. Switching kernels (or summing in another
 * order) would change every trained model's numbers, which the project caches and quotes. So
 * this file computes every element of C with exactly the floating-point operations of the
 * OpenBLAS kernel, in a different, faster schedule.
 *
 * What OpenBLAS computes (found by probing OpenBLAS 0.3.21's Haswell sgemm, every element of
 * C of many shapes and transposes; the calibration below re-checks it for each shape):
 *   - K is cut into blocks as its level-3 driver does: blocks of Q = 320 while at least 2Q
 *     remain, then the rest in one block, or in two when it exceeds Q (the first half rounded
 *     up to a multiple of 8);
 *   - per block, each element of C is one of two sums of the products a_ik·b_kj, each product
 *     added by an FMA:
 *       single: one chain over the block's k in order;
 *       split:  two chains, even and odd k, over the first multiple of 8 of the block's k, the
 *               remaining k appended to the even chain; the block's sum is even + odd;
 *     which one depends on where the element falls in the kernel's micro-tiles (edges of the
 *     column range, the remainder rows, alternating 6-row panels…);
 *   - C = block_sum·alpha + C per block (C zero-filled first when beta = 0): one FMA in the
 *     Haswell kernels; the SkylakeX kernels round block_sum·alpha first, then add C (the same
 *     bits unless alpha ≠ 1 and C ≠ 0, so the calibration's third check tells them apart).
 *
 * Calibration. The first time a shape (ta, tb, m, n, k) is seen, OpenBLAS computes a probe
 * product whose value tells the two sums apart in every element (row i of op(A) = 1, 2⁻²⁴ at
 * k = 1 and 3, 0 elsewhere; op(B) = 1: the single chain rounds both 2⁻²⁴ away and gives 1, the
 * split sum gives 1 + 2⁻²³); any other value refuses the shape. The map of split lanes is then
 * checked against OpenBLAS on random operands (alpha 1 and beta 1, alpha ≠ 1 and beta 0, then
 * alpha ≠ 1 and beta 1 with one FMA or with the rounded product added),
 * bit for bit over all of C; a shape that differs anywhere stays with OpenBLAS. So another
 * OpenBLAS (another kernel set, another version) is never silently replaced: its shapes simply
 * fail the calibration and run through cblas_sgemm as before.
 *
 * Kernel. AVX-512: rows of C in blocks that share one lane map (up to 6 rows, or 3 when a
 * register holds split lanes), 16 columns per register, up to 4 registers; a register with split
 * lanes keeps a second accumulator for the odd k of those lanes (masked FMAs). op(A) elements
 * are broadcast from where they are; op(B) rows are read in place when B is not transposed and
 * from a transposed copy otherwise. No packing, no zero-filling of C for beta = 0.
 *
 * OUTLIERLAB_GEMM=blas (or ol_set_gemm_fast(0)) sends every product to OpenBLAS;
 * OUTLIERLAB_GEMM_DEBUG=1 prints each shape's calibration to stderr.
 */
#include "internal.h"
#include <stdlib.h>
#include <stdatomic.h>
#include <pthread.h>
#include <cblas.h>
#include <omp.h>

extern void openblas_set_num_threads(int num_threads);

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OL_HAVE_AVX512_GEMM 1
#else
#define OL_HAVE_AVX512_GEMM 0
#endif

#define KQ 320   /* OpenBLAS's K block (GEMM_Q) */
#define KU 8     /* its rounding of the halved last blocks (GEMM_UNROLL_M) */
#define MAXR 6   /* rows of C per micro-kernel (registers: 6 × 4 accumulators, 4 of op(B), 1 of op(A)) */
#define MAXZ 4   /* 16-column registers per micro-kernel */

/* eligible shapes: small products, where the calibration is cheap and OpenBLAS is slow */
#define FAST_MAX_MNK ((int64_t)1 << 25)
#define FAST_MAX_DIM 4096

/* ------------------------------------------------------------------ plans */
typedef struct rowblk { int32_t i0, R, pat; } rowblk;   /* rows i0..i0+R−1 share lane map pat */
typedef struct gplan {
    int32_t ta, tb, m, n, k, ok;
    int32_t muladd;        /* C = round(block_sum·alpha) + C (two roundings) instead of one FMA */
    int32_t nz;            /* 16-column registers per row: ceil(n/16) */
    int32_t npat, nblk;
    uint16_t *pat;         /* npat × nz split-lane masks */
    rowblk *blk;
    struct gplan *next;
} gplan;

#define NBUCKET 256
static _Atomic(gplan *) g_plans[NBUCKET];
static pthread_mutex_t g_plan_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_fast = -1;   /* -1: not decided yet; 0 off; 1 on */

static unsigned plan_hash(int ta, int tb, int m, int n, int k) {
    uint64_t h = ol__hash64((uint64_t)(ta * 2 + tb), ((uint64_t)m << 42) ^ ((uint64_t)n << 21) ^ (uint64_t)k);
    return (unsigned)(h % NBUCKET);
}

/* the length of OpenBLAS's K block that starts at ls (of k) */
static inline int kblock_next(int k, int ls) {
    int ml = k - ls;
    if (ml >= 2 * KQ) return KQ;
    if (ml > KQ) return ((ml / 2 + KU - 1) / KU) * KU;
    return ml;
}

#if OL_HAVE_AVX512_GEMM
/* ------------------------------------------------------------------ kernel */
typedef struct gjob {
    int ta, k;
    float alpha;
    const float *A; int lda;          /* op(A)[i][kk] = ta ? A[kk*lda + i] : A[i*lda + kk] */
    const float *B; int ldb;          /* op(B) row kk = B + kk*ldb (row-major k × n, in place or a copy) */
    float *C; int ldc;
    int beta0;                        /* C is not read: the first block adds to 0 */
    int muladd;                       /* block_sum·alpha rounded, then added to C (else one FMA) */
} gjob;

#define TGT __attribute__((target("avx512f")))

/* R rows from i0 × Z registers from column j0; types tz: 0 single chains only, 1 some split
 * lanes (mask pz); lm = the lanes of the last register inside C's columns */
static inline __attribute__((always_inline)) TGT void
micro(const gjob *g, int i0, int j0, const int R, const int Z, const int t0, const int t1, const int t2,
      const int t3, const uint16_t *pz, __mmask16 lm) {
    const int tz[4] = { t0, t1, t2, t3 };
    const __mmask16 p0 = pz[0], p1 = Z > 1 ? pz[1] : 0, p2 = Z > 2 ? pz[2] : 0, p3 = Z > 3 ? pz[3] : 0;
    const __mmask16 par[4] = { p0, p1, p2, p3 };
    const __m512 av = _mm512_set1_ps(g->alpha);
    const int K = g->k, astep = g->ta ? g->lda : 1;
    const int64_t ldb = g->ldb;
    const float *arow[MAXR];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) arow[r] = g->ta ? g->A + (i0 + r) : g->A + (int64_t)(i0 + r) * g->lda;
#define LOADB(z, ptr) ((z) == Z - 1 ? _mm512_maskz_loadu_ps(lm, (ptr) + 16 * (z)) : _mm512_loadu_ps((ptr) + 16 * (z)))
    for (int ls = 0, first = 1; ls < K; first = 0) {
        int L = kblock_next(K, ls), L8 = L & ~7;
        __m512 c1[MAXR][MAXZ], c2[MAXR][MAXZ];
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 8")
            for (int z = 0; z < Z; z++) { c1[r][z] = _mm512_setzero_ps(); c2[r][z] = _mm512_setzero_ps(); }
        const float *bk = g->B + (int64_t)ls * ldb + j0;
        const float *ak[MAXR];
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) ak[r] = arow[r] + (int64_t)ls * astep;
/* every lane: c1 += op(A)[i][k]·op(B)[k] (op(B) row k at bk) */
#define FMA_ALL() do { \
            __m512 b_[MAXZ]; \
            _Pragma("GCC unroll 8") \
            for (int z = 0; z < Z; z++) b_[z] = LOADB(z, bk); \
            _Pragma("GCC unroll 8") \
            for (int r = 0; r < R; r++) { \
                __m512 a = _mm512_set1_ps(ak[r][0]); \
                _Pragma("GCC unroll 8") \
                for (int z = 0; z < Z; z++) c1[r][z] = _mm512_fmadd_ps(a, b_[z], c1[r][z]); \
            } } while (0)
        int kk = 0;
        for (; kk < L8; kk += 2) {   /* even k: every lane's first chain; odd k: split lanes' second */
            FMA_ALL();
            __m512 b[MAXZ];
            _Pragma("GCC unroll 8")
            for (int z = 0; z < Z; z++) b[z] = LOADB(z, bk + ldb);
            _Pragma("GCC unroll 8")
            for (int r = 0; r < R; r++) {
                __m512 a = _mm512_set1_ps(ak[r][astep]);
                _Pragma("GCC unroll 8")
                for (int z = 0; z < Z; z++) {
                    if (!tz[z]) c1[r][z] = _mm512_fmadd_ps(a, b[z], c1[r][z]);
                    else {
                        c1[r][z] = _mm512_mask3_fmadd_ps(a, b[z], c1[r][z], (__mmask16)~par[z]);
                        c2[r][z] = _mm512_mask3_fmadd_ps(a, b[z], c2[r][z], par[z]);
                    }
                }
                ak[r] += 2 * astep;
            }
            bk += 2 * ldb;
        }
        for (; kk < L; kk++) {       /* the block's last k (fewer than 8): every lane's first chain */
            FMA_ALL();
            _Pragma("GCC unroll 8")
            for (int r = 0; r < R; r++) ak[r] += astep;
            bk += ldb;
        }
#undef FMA_ALL
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            float *crow = g->C + (int64_t)(i0 + r) * g->ldc + j0;
            _Pragma("GCC unroll 8")
            for (int z = 0; z < Z; z++) {
                __m512 sum = c1[r][z];
                if (tz[z]) sum = _mm512_mask_add_ps(sum, par[z], sum, c2[r][z]);
                __mmask16 m = z == Z - 1 ? lm : (__mmask16)0xFFFF;
                __m512 cv = first && g->beta0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, crow + 16 * z);
                __m512 out = g->muladd ? _mm512_add_ps(_mm512_mul_ps(sum, av), cv) : _mm512_fmadd_ps(sum, av, cv);
                _mm512_mask_storeu_ps(crow + 16 * z, m, out);
            }
        }
        ls += L;
    }
#undef LOADB
}

typedef void (*microfn)(const gjob *, int, int, const uint16_t *, __mmask16);
#define MK(R, Z, a, b, c, d) \
    static TGT void mk_##R##_##Z##_##a##b##c##d(const gjob *g, int i0, int j0, const uint16_t *pz, __mmask16 lm) { \
        micro(g, i0, j0, R, Z, a, b, c, d, pz, lm); }
#define MKR(R) \
    MK(R, 4, 0, 0, 0, 0) MK(R, 4, 1, 0, 0, 0) MK(R, 4, 0, 0, 0, 1) MK(R, 4, 1, 0, 0, 1) MK(R, 4, 1, 1, 1, 1) \
    MK(R, 2, 0, 0, 0, 0) MK(R, 2, 1, 0, 0, 0) MK(R, 2, 0, 1, 0, 0) MK(R, 2, 1, 1, 0, 0) \
    MK(R, 1, 0, 0, 0, 0) MK(R, 1, 1, 0, 0, 0)
MKR(1) MKR(2) MKR(3)
MK(4, 4, 0, 0, 0, 0) MK(5, 4, 0, 0, 0, 0) MK(6, 4, 0, 0, 0, 0)
MK(4, 2, 0, 0, 0, 0) MK(5, 2, 0, 0, 0, 0) MK(6, 2, 0, 0, 0, 0)
MK(4, 1, 0, 0, 0, 0) MK(5, 1, 0, 0, 0, 0) MK(6, 1, 0, 0, 0, 0)
#define PICK(R) \
    static microfn pick_##R(int Z, int tb) { \
        if (Z == 4) return tb == 0 ? mk_##R##_4_0000 : tb == 1 ? mk_##R##_4_1000 : tb == 8 ? mk_##R##_4_0001 : \
                           tb == 9 ? mk_##R##_4_1001 : mk_##R##_4_1111; \
        if (Z == 2) return tb == 0 ? mk_##R##_2_0000 : tb == 1 ? mk_##R##_2_1000 : tb == 2 ? mk_##R##_2_0100 : \
                           mk_##R##_2_1100; \
        return tb == 0 ? mk_##R##_1_0000 : mk_##R##_1_1000; }
PICK(1) PICK(2) PICK(3)
/* R rows (1..6) of registers that are all single (6 rows fit in the 32 vector registers);
 * with split lanes at most 3 rows run together (the code below splits row blocks so) */
static microfn pick(int R, int Z, int tb) {
    if (tb == 0 && R > 3) {
        if (Z == 4) return R == 6 ? mk_6_4_0000 : R == 5 ? mk_5_4_0000 : mk_4_4_0000;
        if (Z == 2) return R == 6 ? mk_6_2_0000 : R == 5 ? mk_5_2_0000 : mk_4_2_0000;
        return R == 6 ? mk_6_1_0000 : R == 5 ? mk_5_1_0000 : mk_4_1_0000;
    }
    return R == 3 ? pick_3(Z, tb) : R == 2 ? pick_2(Z, tb) : pick_1(Z, tb);
}

static void run_plan(const gplan *p, const gjob *g) {
    int nz = p->nz;
    for (int b = 0; b < p->nblk; b++) {
        const rowblk *rb = &p->blk[b];
        const uint16_t *pat = p->pat + (int64_t)rb->pat * nz;
        for (int z0 = 0; z0 < nz;) {
            int Z = nz - z0 >= 4 ? 4 : nz - z0 >= 2 ? 2 : 1;
            int tb = 0;
            for (int z = 0; z < Z; z++) if (pat[z0 + z]) tb |= 1 << z;
            int last = (z0 + Z) * 16 > p->n ? p->n - (z0 + Z - 1) * 16 : 16;
            __mmask16 lm = (__mmask16)((1u << last) - 1u);
            if (tb == 0 || rb->R <= 3) pick(rb->R, Z, tb)(g, rb->i0, z0 * 16, pat + z0, lm);
            else   /* split lanes: rows in blocks of at most 3 */
                for (int r0 = 0; r0 < rb->R; r0 += 3)
                    pick(rb->R - r0 < 3 ? rb->R - r0 : 3, Z, tb)(g, rb->i0 + r0, z0 * 16, pat + z0, lm);
            z0 += Z;
        }
    }
}

/* 16×16 transpose in registers: rows r[0..15] -> columns */
static inline __attribute__((always_inline)) TGT void tr16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i]     = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        t[i]      = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4]  = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8]  = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 4; i++) {
        r[i]      = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8]  = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
        r[i + 4]  = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xDD);
    }
}

/* dst (k × n, row-major) = Bᵀ of B (n × k, leading dim ldb), by 16×16 blocks */
static TGT void transpose_into(float *dst, const float *B, int ldb, int k, int n) {
    for (int j0 = 0; j0 < n; j0 += 16)
        for (int k0 = 0; k0 < k; k0 += 16) {
            int nj = n - j0 < 16 ? n - j0 : 16, nk = k - k0 < 16 ? k - k0 : 16;
            __mmask16 mk = (__mmask16)((1u << nk) - 1u), mj = (__mmask16)((1u << nj) - 1u);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < nj ? _mm512_maskz_loadu_ps(mk, B + (int64_t)(j0 + i) * ldb + k0) : _mm512_setzero_ps();
            tr16(r);
            for (int i = 0; i < nk; i++) _mm512_mask_storeu_ps(dst + (int64_t)(k0 + i) * n + j0, mj, r[i]);
        }
}

/* a grow-only per-thread buffer of at least need floats (NULL: out of memory) */
typedef struct tlbuf { float *p; int64_t cap; } tlbuf;
static float *grow(tlbuf *b, int64_t need) {
    if (need > b->cap) {
        float *np = realloc(b->p, (size_t)need * 4);
        if (!np) return NULL;
        b->p = np;
        b->cap = need;
    }
    return b->p;
}

/* per-thread copy of op(B) = Bᵀ */
static float *bt_copy(const float *B, int ldb, int k, int n) {
    static _Thread_local tlbuf buf;
    float *d = grow(&buf, (int64_t)k * n);
    if (d) transpose_into(d, B, ldb, k, n);
    return d;
}

/* bt: op(B) = Bᵀ already transposed (k × n, row-major), or NULL */
static int run_fast(const gplan *p, float alpha, const float *A, int lda, const float *B, int ldb, const float *bt,
                    int beta0, float *C, int ldc) {
    gjob g = { p->ta, p->k, alpha, A, lda, B, ldb, C, ldc, beta0, p->muladd };
    if (p->tb) {
        g.B = bt ? bt : bt_copy(B, ldb, p->k, p->n);
        if (!g.B) return -1;
        g.ldb = p->n;
    }
    run_plan(p, &g);
    return 0;
}
#endif

/* ------------------------------------------------------------------ calibration */
static void blas(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* the lane map of a shape from OpenBLAS's probe product, then two checks on random data;
 * p->ok = 1 only when all of C agrees bit for bit */
static void calibrate(gplan *p) {
#if OL_HAVE_AVX512_GEMM
    /* OpenBLAS must run single-threaded, as in the engine's products: inside a parallel region
     * it does; outside one (ol__gemm_prepare on the calling thread) it would split the product
     * over its threads, another rounding. (Its OpenMP build sets the OpenMP thread count with
     * its own; the engine's count is restored after.) */
    int serial = !omp_in_parallel();
    if (serial) openblas_set_num_threads(1);
    int ta = p->ta, tb = p->tb, m = p->m, n = p->n, k = p->k, nz = (n + 15) / 16;
    int lda = ta ? m : k, ldb = tb ? k : n;
    int64_t na = (int64_t)m * k, nb = (int64_t)k * n, nc = (int64_t)m * n;
    float *A = malloc((size_t)na * 4), *B = malloc((size_t)nb * 4), *C = malloc((size_t)nc * 4),
          *C2 = malloc((size_t)nc * 4), *C0 = malloc((size_t)nc * 4);
    uint16_t *lanes = calloc((size_t)m * nz, 2);
    if (!A || !B || !C || !C2 || !C0 || !lanes) goto done;
    /* probe: op(A)[i] = (1, 2^-24, 0, 2^-24, 0, …), op(B) = 1 */
    for (int64_t e = 0; e < na; e++) A[e] = 0.0f;
    for (int i = 0; i < m; i++)
        for (int kk = 0; kk < k && kk < 4; kk++)
            A[ta ? (int64_t)kk * lda + i : (int64_t)i * lda + kk] = kk == 0 ? 1.0f : kk == 2 ? 0.0f : 0x1p-24f;
    for (int64_t e = 0; e < nb; e++) B[e] = 1.0f;
    blas(ta, tb, m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C, n);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float c = C[(int64_t)i * n + j];
            if (c == 1.0f + 0x1p-23f) lanes[(int64_t)i * nz + j / 16] |= (uint16_t)(1u << (j % 16));
            else if (c != 1.0f) goto done;   /* neither sum: not a kernel this file knows */
        }
    /* row blocks: runs of rows with one lane map, at most MAXR rows each */
    p->pat = malloc((size_t)m * nz * 2);
    p->blk = malloc((size_t)m * sizeof *p->blk);
    if (!p->pat || !p->blk) goto done;
    for (int i = 0; i < m;) {
        const uint16_t *li = lanes + (int64_t)i * nz;
        int pid = -1;
        for (int q = 0; q < p->npat && pid < 0; q++)
            if (memcmp(p->pat + (int64_t)q * nz, li, (size_t)nz * 2) == 0) pid = q;
        if (pid < 0) { pid = p->npat++; memcpy(p->pat + (int64_t)pid * nz, li, (size_t)nz * 2); }
        int R = 1;
        while (R < MAXR && i + R < m && memcmp(lanes + (int64_t)(i + R) * nz, li, (size_t)nz * 2) == 0) R++;
        p->blk[p->nblk++] = (rowblk){ i, R, pid };
        i += R;
    }
    p->nz = nz;
    /* checks: alpha 1, beta 1 over random C; alpha 0.7 (not a power of two), beta 0; alpha 0.7,
     * beta 1 (a scaled product added to C: the attention blocks' scores and gradients) */
    for (int trial = 0; trial < 3; trial++) {
        uint64_t seed = 0x5eed0000u + (uint64_t)trial;
        for (int64_t e = 0; e < na; e++) A[e] = 2.0f * ol__u01(seed, (uint64_t)e) - 1.0f;
        for (int64_t e = 0; e < nb; e++) B[e] = 2.0f * ol__u01(seed + 7, (uint64_t)e) - 1.0f;
        for (int64_t e = 0; e < nc; e++) C0[e] = 2.0f * ol__u01(seed + 13, (uint64_t)e) - 1.0f;
        float alpha = trial ? 0.7f : 1.0f;
        int beta0 = trial == 1;
        memcpy(C, C0, (size_t)nc * 4);
        blas(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta0 ? 0.0f : 1.0f, C, n);
        /* alpha ≠ 1 with beta 1 tells how the kernel set scales: one FMA (Haswell) or a rounded
         * product added to C (SkylakeX); the first two trials cannot tell them apart */
        for (p->muladd = 0; p->muladd < 2; p->muladd++) {
            memcpy(C2, C0, (size_t)nc * 4);
            if (run_fast(p, alpha, A, lda, B, ldb, NULL, beta0, C2, n) != 0) goto done;
            if (memcmp(C, C2, (size_t)nc * 4) == 0) break;
            if (trial < 2) goto done;
        }
        if (p->muladd == 2) goto done;
    }
    p->ok = 1;
done:
    if (serial) ol_set_num_threads(ol_get_num_threads());
    free(A); free(B); free(C); free(C2); free(C0); free(lanes);
#else
    (void)p;
#endif
}

static const gplan *plan_get(int ta, int tb, int m, int n, int k) {
    unsigned h = plan_hash(ta, tb, m, n, k);
    for (gplan *p = atomic_load(&g_plans[h]); p; p = p->next)
        if (p->ta == ta && p->tb == tb && p->m == m && p->n == n && p->k == k) return p;
    pthread_mutex_lock(&g_plan_lock);
    gplan *p;
    for (p = atomic_load(&g_plans[h]); p; p = p->next)
        if (p->ta == ta && p->tb == tb && p->m == m && p->n == n && p->k == k) break;
    if (!p && (p = calloc(1, sizeof *p))) {
        *p = (gplan){ .ta = ta, .tb = tb, .m = m, .n = n, .k = k };
        calibrate(p);
        if (getenv("OUTLIERLAB_GEMM_DEBUG"))
            fprintf(stderr, "gemm plan ta %d tb %d m %d n %d k %d: %s (%d lane maps, %d row blocks)\n", ta, tb, m, n, k,
                    p->ok ? "engine kernel" : "OpenBLAS", p->npat, p->nblk);
        p->next = atomic_load(&g_plans[h]);
        atomic_store(&g_plans[h], p);
    }
    pthread_mutex_unlock(&g_plan_lock);
    return p;
}


/* 1 when the kernel may run: AVX-512 here, not switched off (ol_set_gemm_fast, OUTLIERLAB_GEMM=blas) */
static int g_cpu = -1;
static int fast_on(void) {
#if OL_HAVE_AVX512_GEMM
    if (g_cpu < 0) {
        __builtin_cpu_init();
        g_cpu = __builtin_cpu_supports("avx512f") ? 1 : 0;
    }
    if (g_fast < 0) {
        const char *e = getenv("OUTLIERLAB_GEMM");
        g_fast = !(e && strcmp(e, "blas") == 0);
    }
    return g_cpu && g_fast;
#else
    return 0;
#endif
}

int ol_set_gemm_fast(int on) {
    int old = fast_on();
    g_fast = on ? 1 : 0;
    return old;
}

/* the calibrated plan of an eligible shape, or NULL */
static const gplan *fast_plan(int ta, int tb, int m, int n, int k) {
    if (!fast_on() || m <= 0 || n <= 0 || k <= 0) return NULL;
    if (m > FAST_MAX_DIM || n > FAST_MAX_DIM || k > FAST_MAX_DIM || (int64_t)m * n * k > FAST_MAX_MNK) return NULL;
    const gplan *p = plan_get(ta, tb, m, n, k);
    return p && p->ok ? p : NULL;
}

int ol_gemm_engine_kernel(int ta, int tb, int m, int n, int k) { return fast_plan(ta ? 1 : 0, tb ? 1 : 0, m, n, k) != NULL; }

/* 1 when the engine kernel serves products of this shape with these alpha and beta (no call
 * into OpenBLAS then: the engine's own worker threads may run them, pool.c) */
int ol__gemm_fast_serves(int ta, int tb, int m, int n, int k, float alpha, float beta) {
    return (beta == 0.0f || beta == 1.0f) && alpha != 0.0f && fast_plan(ta, tb, m, n, k) != NULL;
}

/* C = alpha·op(A)·op(B) + beta·C (beta 0 or 1) through a calibrated plan; 0 when done, −1
 * when the caller must use cblas_sgemm (shape not eligible or not calibrated). */
int ol__gemm_fast(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc) {
    if ((beta != 0.0f && beta != 1.0f) || alpha == 0.0f) return -1;
    const gplan *p = fast_plan(ta, tb, m, n, k);
    if (!p) return -1;
#if OL_HAVE_AVX512_GEMM
    return run_fast(p, alpha, A, lda, B, ldb, NULL, beta == 0.0f, C, ldc);
#else
    return -1;
#endif
}

/* Products that share a transposed B (row tiles of one x·Wᵀ): Bᵀ (k × n) copied once, in the
 * calling thread's buffer of that slot, when every tile shape (m0 rows, and m1 for the last tile) has a plan;
 * NULL otherwise. ol__gemm_fast_bt then runs a tile with it (−1: use ol__sgemm). */
const float *ol__gemm_fast_bt_prepare(int slot, int ta, int m0, int m1, int n, int k, const float *B, int ldb) {
#if OL_HAVE_AVX512_GEMM
    if (!fast_plan(ta, 1, m0, n, k) || !fast_plan(ta, 1, m1, n, k)) return NULL;
    static _Thread_local tlbuf buf[2];   /* not bt_copy's: the tiles read it while this thread runs some */
    float *d = grow(&buf[slot & 1], (int64_t)k * n);
    if (d) transpose_into(d, B, ldb, k, n);
    return d;
#else
    return NULL;
#endif
}
int ol__gemm_fast_bt(int ta, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                     const float *bt, float beta, float *C, int ldc) {
    if ((beta != 0.0f && beta != 1.0f) || alpha == 0.0f) return -1;
    const gplan *p = fast_plan(ta, 1, m, n, k);
    if (!p) return -1;
#if OL_HAVE_AVX512_GEMM
    return run_fast(p, alpha, A, lda, B, ldb, bt, beta == 0.0f, C, ldc);
#else
    return -1;
#endif
}
