/*
 * internal.h — what the engine's source files share and the public header does not show:
 * the context layout, the tape node, error helpers and small checked utilities.
 */
#ifndef OL_INTERNAL_H
#define OL_INTERNAL_H
#include "outlierlab.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <math.h>
#include <stdatomic.h>

/* ---- errors: set the thread's message and return a failure value ------------------ */
void ol__set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define OL_FAIL(...)     do { ol__set_error(__VA_ARGS__); return NULL; } while (0)
#define OL_FAIL_INT(...) do { ol__set_error(__VA_ARGS__); return -1; } while (0)
/* "(2,3,4)" into buf (at least 64 bytes); returns buf. */
const char *ol__shape_str(const ol_tensor *t, char *buf);
/* Two shape strings for messages: SH(a) uses a per-call buffer. */
#define OL_SHAPE(t) ol__shape_str((t), (char[64]){0})

/* ---- arenas ----------------------------------------------------------------------- */
typedef struct ol_arena {
    char   *base;
    int64_t cap, used, peak;
} ol_arena;
int   ol__arena_init(ol_arena *a, int64_t cap, const char *what);
void  ol__arena_free(ol_arena *a);
void *ol__arena_alloc(ol_arena *a, int64_t bytes, const char *what);  /* 64-byte aligned */

/* ---- tape ------------------------------------------------------------------------- */
typedef struct ol_node ol_node;
typedef void (*ol_backward_fn)(ol_node *n);
struct ol_node {
    ol_backward_fn backward;
    ol_node   *prev;
    const char *op;
    ol_tensor *out;
    ol_tensor *in[4];
    int32_t    nin;
    int32_t    iarg[6];
    float      farg[4];
    uint64_t   uarg;
    void      *saved;      /* op-specific data in the step arena */
    void      *saved2;
    int32_t    write_first; /* the backward handles its inputs' pending gradients itself (below) */
};

typedef struct ol_param_info {
    ol_tensor *t;
    int64_t offset;
    int32_t group;
} ol_param_info;

struct ol_ctx {
    int64_t   param_cap, param_used;
    float    *params, *grads, *adam_m, *adam_v;   /* flat buffers of param_cap floats */
    int64_t   params_mapped_bytes;
    ol_param_info *ptab;
    int32_t   nparams, ptab_cap;
    ol_arena  persist;   /* param tensor structs, persistent tensors */
    ol_arena  step;      /* step tensors, their grads, tape nodes */
    ol_node  *tape;      /* tail of the tape (most recent node) */
    uint64_t  gen;       /* current step generation (>= 1) */
    int       grad_enabled;
    /* rank-invariant shard sums (dist.c, ol_grad_shard_push): a binary-counter stack of
     * partial gradient sums, entry i at tree level shard_lvl[i] */
    float    *shard_buf[32];
    int32_t   shard_lvl[32], shard_n;
    int64_t   shard_cap;
};

/* Allocate a step tensor (data included) / raw step memory. */
ol_tensor *ol__new(ol_ctx *ctx, int32_t dtype, int32_t ndim, const int64_t *shape, const char *name);
void      *ol__step_alloc(ol_ctx *ctx, int64_t bytes, const char *what);
/* A header for a step tensor (from the header ring, so stale handles stay detectable). */
ol_tensor *ol__step_header(ol_ctx *ctx, const char *what);
/* Validate an op input: non-NULL, of this ctx's current step (or persistent), dtype f32. */
int  ol__check_live(const char *op, const ol_tensor *t);
int  ol__check_f32(const char *op, const ol_tensor *t);
/* 1 if the op's output must be recorded: grad mode on and some input requires grad. */
int  ol__needs_grad(ol_ctx *ctx, int n, ol_tensor *const *ins);
/* Push a node for out (sets out->requires_grad); returns the node or NULL (error set). */
ol_node *ol__record(const char *op, ol_backward_fn fn, ol_tensor *out, int n, ol_tensor *const *ins);
/* The gradient buffer of t, allocated zero-filled in the step arena on first use (a pending
 * buffer, below, is zero-filled first). */
float *ol__grad(ol_tensor *t);

/* Write-first gradients. ol_backward allocates the gradients of step tensors without zeroing
 * them and marks them pending (t->grad_pending = 1: the gradient is 0, the buffer holds
 * garbage). A backward that sets node->write_first = 1 takes the first contribution to a
 * pending input as a store instead of an add (no memset, no read): ol__grad_first(t) returns
 * 1 once for a pending gradient and clears the mark. For the same bits as adding into zeros,
 * a stored value v is written as 0.0f + v (which turns −0 into +0, as 0 + v does); a copy of
 * another gradient needs no such care, since no gradient buffer ever holds −0 (it starts at
 * +0 and only sums are added in: x + y = −0 needs x = y = −0 in round-to-nearest). Inputs of
 * other backwards are zero-filled by ol_backward before they run, so they accumulate as ever. */
static inline int ol__grad_first(ol_tensor *t) {
    int f = t->grad_pending;
    t->grad_pending = 0;
    return f;
}
/* dst[i] = 0.0f + (expr) when fresh (a first write), else dst[i] += (expr), for i < n, over
 * the threads when n > OL_PAR_MIN (the element count must be named n). */
#define OL_GRAD_LOOP(fresh, n, dst, expr) do { \
    if (fresh) { \
        _Pragma("omp parallel for simd schedule(static) if (n > OL_PAR_MIN)") \
        for (int64_t i = 0; i < (n); i++) (dst)[i] = 0.0f + (expr); \
    } else { \
        _Pragma("omp parallel for simd schedule(static) if (n > OL_PAR_MIN)") \
        for (int64_t i = 0; i < (n); i++) (dst)[i] += (expr); \
    } } while (0)

/* counter-based hashing RNG */
uint64_t ol__hash64(uint64_t seed, uint64_t idx);
static inline float ol__u01(uint64_t seed, uint64_t idx) {
    return (float)((ol__hash64(seed, idx) >> 40) * (1.0 / 16777216.0));
}

/* x < lo ? lo : x > hi ? hi : x (NaN stays NaN), as a blend of bit patterns. Why not the
 * selects: GCC's partial redundancy elimination folds the code after a `x < lo ? lo : x` on the
 * constant path, which leaves the rest on a conditional path, and under trapping math (the
 * default) a conditional float operation is only if-converted into a masked vector operation,
 * which AVX2 does not have: there every loop using it stayed scalar and branchy (SwiGLU's e^x
 * took 19 % of perf's samples of the organism's training benchmark; docs/reference/training.md, "e^x on a
 * CPU without AVX-512"). The blend has no branch and the same result bit for bit. */
static inline float ol__clampf(float x, float lo, float hi) {
    uint32_t xb, lb, hb;
    memcpy(&xb, &x, 4);
    memcpy(&lb, &lo, 4);
    memcpy(&hb, &hi, 4);
    uint32_t ml = 0u - (uint32_t)(x < lo), mh = 0u - (uint32_t)(x > hi);
    xb = (xb & ~(ml | mh)) | (lb & ml) | (hb & mh);
    memcpy(&x, &xb, 4);
    return x;
}

/* keep ? x : +0.0f as a mask of bits (x computed in any case): a float select under a float
 * comparison can become a branch that keeps a loop scalar on AVX2 (see ol__clampf) */
static inline float ol__keepf(int keep, float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    b &= 0u - (uint32_t)(keep != 0);
    memcpy(&x, &b, 4);
    return x;
}

/* e^x in plain float arithmetic (no libm call, so loops that use it vectorise without
 * fast-math): range reduction x = n·ln2 + r with a Cody–Waite split of ln2, e^r by its degree-7
 * Taylor polynomial (truncation < 2e-8 relative), 2^n through the exponent bits; x is clamped
 * to [−87.3, 88.3] (e^x = +inf above, ≈ 1e-38 below). Within 1 ulp or so of expf: the GELU and
 * attention tests compare it with the libm formulas. */
static inline float ol__expf(float x) {
    float big = x > 88.3f ? INFINITY : 1.0f;       /* e^x overflows: +inf (NaN stays NaN) */
    x = ol__clampf(x, -87.3f, 88.3f);
    /* n = round(x/ln2) by the 1.5·2^23 trick (floorf would block vectorisation) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120
              + r * (1.0f / 720 + r * (1.0f / 5040)))))));
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale * big;
}

/* Size arithmetic with overflow checks: returns -1 on overflow. */
int64_t ol__numel(int32_t ndim, const int64_t *shape);

/* Step profile (core.c, ol_profile_*): the calling thread's seconds per category. */
enum { OL_PROF_MATMUL = 0, OL_PROF_BACKWARD = 1, OL_PROF_ATTENTION_BWD = 2, OL_PROF_N = 3 };
extern int g_prof_on;
void ol__prof_add(int what, double seconds);
void ol__zero(float *p, int64_t n);   /* parallel memset of n floats (core.c) */
/* Flush-to-zero (core.c, "subnormals"): the requested mode, its change counter, and setting it
 * on the calling thread. */
extern _Atomic int ol__fp_flush;
extern _Atomic unsigned ol__fp_gen;
void ol__fp_apply(int on);
/* C = beta·C + op(A)·op(B) for batch products (strides sa, sb, sc floats), row-major, C (M,N)
 * with ldc = N, A (M,K) or (K,M) if ta, B (K,N) or (N,K) if tb: bit-identical results for
 * any thread count (fixed work items of single-threaded sgemm; blas.c). 0 or -1 (out of memory). */
int ol__sgemm_batched(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t sa,
                      const float *B, int64_t sb, float beta, float *C, int64_t sc, int64_t batch);
/* The same product as its fixed work items: prepared (slot 0 or 1: which of the calling
 * thread's scratch buffers it uses), then every item run once, in any order, on any thread;
 * ol__sgemm_batched2 runs two prepared independent products in one parallel region. */
typedef struct ol_gemm_task {
    int ta, tb, rows;
    int64_t M, N, K;
    const float *A; int64_t sa;
    const float *B; int64_t sb;
    float beta;
    float *C; int64_t sc;
    int64_t batch, D, nt, tile, nk, kc;
    float *part;                 /* partial products of K chunks 1.. */
    _Atomic int32_t *done;       /* chunks finished per tile */
    const float *bt;             /* the engine kernel's copy of Bᵀ shared by row tiles, or NULL */
    int64_t items;
    int fast;                    /* the engine kernel serves every item (no OpenBLAS call in them) */
} ol_gemm_task;
int  ol__gemm_prepare(ol_gemm_task *g, int slot, int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                      int64_t sa, const float *B, int64_t sb, float beta, float *C, int64_t sc, int64_t batch);
void ol__gemm_item(const ol_gemm_task *g, int64_t it);
int  ol__sgemm_batched2(const ol_gemm_task *g1, const ol_gemm_task *g2);
/* One row-major cblas_sgemm, C (m,n) with leading dim ldc = beta·C + alpha·op(A)·op(B);
 * single-threaded inside a parallel region; beta = 0 zero-fills C in one pass (blas.c). */
void ol__sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
               float beta, float *C, int ldc);
/* The same product (beta 0 or 1) by gemm.c's kernel when the shape is calibrated against
 * OpenBLAS (the same bits); 0 when done, −1 when the caller must call cblas_sgemm. */
int ol__gemm_fast(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc);
/* Row tiles of one product with a transposed B (x·Wᵀ): Bᵀ copied once when both tile shapes
 * (m0 rows, m1 for the last) have a plan, else NULL; then each tile by ol__gemm_fast_bt with it
 * (−1: the caller uses ol__sgemm). */
int ol__gemm_fast_serves(int ta, int tb, int m, int n, int k, float alpha, float beta);
const float *ol__gemm_fast_bt_prepare(int slot, int ta, int m0, int m1, int n, int k, const float *B, int ldb);
int ol__gemm_fast_bt(int ta, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                     const float *bt, float beta, float *C, int ldc);

/* The engine's worker threads (pool.c): fn(arg, i, tid) for every i in [0, n), each item once,
 * on the calling thread (tid 0) and the workers (tid 1 .. threads − 1); the caller waits only for
 * the items other threads have started. Items must not depend on which thread runs them. */
typedef void (*ol_item_fn)(void *arg, int64_t item, int tid);
void ol__par(int64_t n, ol_item_fn fn, void *arg);
/* fn(arg, lo, hi) over [0, n) in fixed ranges of `grain` (the last one shorter), on the
 * engine's threads (ol__par) when par (the caller's size test, as an OpenMP region's if clause)
 * and there is more than one range, else as one call fn(arg, 0, n) on the calling thread. For loops whose elements are independent (or
 * whose ranges are fixed by `grain` alone): the bits do not depend on the thread count. The
 * elementwise ops of a training step use it instead of an OpenMP region: no fork/join barrier
 * that waits for a thread the host has descheduled (pool.c). */
typedef void (*ol_range_fn)(void *arg, int64_t lo, int64_t hi);
void ol__par_range(int64_t n, int64_t grain, int par, ol_range_fn fn, void *arg);

/* OpenMP: parallelise loops with at least this many elements of work. */
#define OL_PAR_MIN 32768
/* ol__par_range: elements per range of an elementwise loop (16 ranges for a 2048 × 64 tensor) */
#define OL_PAR_GRAIN 8192

/* rows = numel / last dim */
/* rows = the product of the leading dims (not numel / last: a last dim of 0 must not divide) */
static inline int64_t ol__rows(const ol_tensor *t) {
    int64_t r = 1;
    for (int i = 0; i < t->ndim - 1; i++) r *= t->shape[i];
    return r;
}
static inline int64_t ol__last(const ol_tensor *t) { return t->shape[t->ndim - 1]; }

/* ---- erff and expf bit for bit as GNU libm on x86-64 (engine/libm_exact.c) ------------ */
float ol__erff1(float x);
float ol__expf1(float x);
void  ol__erff_n(const float *x, float *y, int64_t n);   /* y[i] = erff(x[i]); vectorised */
void  ol__expf_n(const float *x, float *y, int64_t n);   /* y[i] = expf(x[i]); vectorised */

#endif
