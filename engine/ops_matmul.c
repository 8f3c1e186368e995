/*
 * ops_matmul.c — matrix products through cblas_sgemm: ol_matmul (with transpose flags,
 * batched over leading dims) and ol_linear (x·wᵀ + bias), forward and backward side by side.
 * Backward products use beta = 1 so they accumulate straight into the gradient buffers.
 */
#include "internal.h"
#include <cblas.h>
#include <omp.h>

/* C[M,N] (+)= op(A)·op(B); A is (M,K) or (K,M) if ta; B is (K,N) or (N,K) if tb; row-major;
 * batch products with strides. Through ol__sgemm_batched (blas.c): the same bits with any
 * thread count. */
static void gemmb(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t sa, const float *B,
                  int64_t sb, float beta, float *C, int64_t sc, int64_t batch) {
    /* empty products: BLAS would refuse the leading dimensions (lda >= 1) */
    if (M == 0 || N == 0) return;
    if (K == 0) { if (beta == 0.0f) for (int64_t i = 0; i < batch; i++) memset(C + i * sc, 0, (size_t)(M * N) * 4); return; }
    double t0 = g_prof_on ? omp_get_wtime() : 0.0;
    ol__sgemm_batched(ta, tb, M, N, K, A, sa, B, sb, beta, C, sc, batch);
    if (g_prof_on) ol__prof_add(OL_PROF_MATMUL, omp_get_wtime() - t0);
}
/* One product of a backward pass, for gemm_pair. */
typedef struct {
    int ta, tb;
    int64_t M, N, K;
    const float *A; int64_t sa;
    const float *B; int64_t sb;
    float beta;
    float *C; int64_t sc;
    int64_t batch;
} prod;
/* the two products of a backward (the gradients of two different tensors: neither writes what
 * the other reads or writes), in one parallel region; each the same bits as through gemmb */
static void gemm_pair(const prod *p) {
    ol_gemm_task g[2];
    for (int i = 0; i < 2; i++) {
        const prod *q = &p[i];
        if (q->K == 0 || q->M == 0 || q->N == 0) {   /* gemmb's empty products; no items */
            gemmb(q->ta, q->tb, q->M, q->N, q->K, q->A, q->sa, q->B, q->sb, q->beta, q->C, q->sc, q->batch);
            memset(&g[i], 0, sizeof g[i]);
        } else if (ol__gemm_prepare(&g[i], i, q->ta, q->tb, q->M, q->N, q->K, q->A, q->sa, q->B, q->sb, q->beta,
                                    q->C, q->sc, q->batch) != 0) {
            return;   /* out of memory (error set) */
        }
    }
    double t0 = g_prof_on ? omp_get_wtime() : 0.0;
    ol__sgemm_batched2(&g[0], &g[1]);
    if (g_prof_on) ol__prof_add(OL_PROF_MATMUL, omp_get_wtime() - t0);
}

/* ------------------------------------------------------------------ matmul */
/* dims of one product, kept for the backward pass (int64: M can exceed int32 before the check) */
typedef struct { int64_t batch, M, N, K; int32_t ta, tb; } mm_dims;

static void matmul_backward(ol_node *n) {
    mm_dims *d = n->saved;
    ol_tensor *a = n->in[0], *b = n->in[1];
    const float *dC = n->out->grad;
    int64_t M = d->M, N = d->N, K = d->K;
    int64_t sa = M * K, sb = K * N, sc = M * N;
    /* a 2-D b is shared by every batch item (d->batch is 1 then: a's leading dims are rows) */
    const float *A = a->data, *B = b->data, *G = dC;
    /* a pending gradient (write-first, internal.h) is stored with beta = 0: OpenBLAS zeroes C
     * and adds the product to it, the same bits as adding into a zero-filled buffer */
    prod p[2];
    if (a->requires_grad) {
        float *dA = a->grad, beta = ol__grad_first(a) ? 0.0f : 1.0f;
        if (!d->ta) p[0] = (prod){ 0, !d->tb, M, K, N, G, sc, B, sb, beta, dA, sa, d->batch };   /* dA = dC·op(B)ᵀ */
        else        p[0] = (prod){ d->tb, 1, K, M, N, B, sb, G, sc, beta, dA, sa, d->batch };    /* dA = op(B)·dCᵀ */
    }
    if (b->requires_grad) {
        float *dB = b->grad, beta = ol__grad_first(b) ? 0.0f : 1.0f;
        if (!d->tb) p[1] = (prod){ !d->ta, 0, K, N, M, A, sa, G, sc, beta, dB, sb, d->batch };   /* dB = op(A)ᵀ·dC */
        else        p[1] = (prod){ 1, d->ta, N, K, M, G, sc, A, sa, beta, dB, sb, d->batch };    /* dB = dCᵀ·op(A) */
    }
    if (a->requires_grad && b->requires_grad && a != b) gemm_pair(p);
    else
        for (int i = 0; i < 2; i++)
            if ((i ? b : a)->requires_grad)
                gemmb(p[i].ta, p[i].tb, p[i].M, p[i].N, p[i].K, p[i].A, p[i].sa, p[i].B, p[i].sb, p[i].beta, p[i].C,
                      p[i].sc, p[i].batch);
}

ol_tensor *ol_matmul(ol_tensor *a, ol_tensor *b, int32_t ta, int32_t tb) {
    if (ol__check_f32("matmul", a) || ol__check_f32("matmul", b)) return NULL;
    if (a->ndim < 2 && !(a->ndim >= 1 && b->ndim == 2 && !ta))
        OL_FAIL("matmul: a '%s' %s needs at least 2 dims", a->name, OL_SHAPE(a));
    mm_dims d = { 1, 0, 0, 0, ta ? 1 : 0, tb ? 1 : 0 };
    int64_t shape[4];
    int32_t nd;
    if (b->ndim == 2) {
        int64_t bk = tb ? b->shape[1] : b->shape[0];
        d.N = tb ? b->shape[0] : b->shape[1];
        if (ta) {
            if (a->ndim != 2)
                OL_FAIL("matmul: ta=1 needs a 2-D a, got a '%s' %s with b '%s' %s", a->name, OL_SHAPE(a), b->name, OL_SHAPE(b));
            d.K = a->shape[0]; d.M = a->shape[1];
        } else {
            d.K = ol__last(a); d.M = ol__rows(a);
        }
        if (d.K != bk)
            OL_FAIL("matmul: inner dims differ: a '%s' %s%s vs b '%s' %s%s", a->name, OL_SHAPE(a), ta ? "ᵀ" : "",
                    b->name, OL_SHAPE(b), tb ? "ᵀ" : "");
        nd = a->ndim;
        for (int i = 0; i < nd - 1; i++) shape[i] = a->shape[i];
        if (ta) shape[0] = d.M;
        shape[nd - 1] = d.N;
    } else {
        if (a->ndim != b->ndim)
            OL_FAIL("matmul: batched operands need equal ndim: a '%s' %s, b '%s' %s", a->name, OL_SHAPE(a), b->name, OL_SHAPE(b));
        nd = a->ndim;
        for (int i = 0; i < nd - 2; i++) {
            if (a->shape[i] != b->shape[i])
                OL_FAIL("matmul: batch dims differ: a '%s' %s, b '%s' %s", a->name, OL_SHAPE(a), b->name, OL_SHAPE(b));
            d.batch *= a->shape[i];
            shape[i] = a->shape[i];
        }
        int64_t ar = a->shape[nd - 2], ac = a->shape[nd - 1], br = b->shape[nd - 2], bc = b->shape[nd - 1];
        d.M = ta ? ac : ar; d.K = ta ? ar : ac;
        d.N = tb ? br : bc;
        if ((tb ? bc : br) != d.K)
            OL_FAIL("matmul: inner dims differ: a '%s' %s%s vs b '%s' %s%s", a->name, OL_SHAPE(a), ta ? "ᵀ" : "",
                    b->name, OL_SHAPE(b), tb ? "ᵀ" : "");
        shape[nd - 2] = d.M;
        shape[nd - 1] = d.N;
    }
    if (d.M > INT32_MAX || d.N > INT32_MAX || d.K > INT32_MAX)
        OL_FAIL("matmul: a '%s' %s, b '%s' %s: a dim exceeds the BLAS int range", a->name, OL_SHAPE(a), b->name, OL_SHAPE(b));
    ol_tensor *c = ol__new(a->ctx, OL_F32, nd, shape, "matmul");
    if (!c) return NULL;
    if (d.K == 0) memset(c->data, 0, (size_t)c->numel * 4);
    else
        gemmb(d.ta, d.tb, d.M, d.N, d.K, a->data, d.M * d.K, b->data, d.K * d.N, 0.0f, c->data, d.M * d.N, d.batch);
    ol_tensor *ins[2] = { a, b };
    if (ol__needs_grad(a->ctx, 2, ins)) {
        ol_node *n = ol__record("matmul", matmul_backward, c, 2, ins);
        if (!n) return NULL;
        n->write_first = 1;
        mm_dims *s = ol__step_alloc(a->ctx, sizeof *s, "matmul");
        if (!s) return NULL;
        *s = d;
        n->saved = s;
    }
    return c;
}

/* ------------------------------------------------------------------ linear */
/* x (M,K) flattened, w (N,K), bias (N): y (M,N) = x·wᵀ + bias */
static void linear_backward(ol_node *n) {
    ol_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    const float *dy = n->out->grad;
    int64_t N = w->shape[0], K = w->shape[1], M = ol__rows(x);
    /* dx += dy·w and dw += dyᵀ·x (beta = 0 stores a pending gradient: see matmul_backward),
     * in one parallel region when both are wanted */
    prod p[2] = { { 0, 0, M, K, N, dy, 0, w->data, 0, 0.0f, x->grad, 0, 1 },
                  { 1, 0, N, K, M, dy, 0, x->data, 0, 0.0f, w->grad, 0, 1 } };
    if (x->requires_grad) p[0].beta = ol__grad_first(x) ? 0.0f : 1.0f;
    if (w->requires_grad) p[1].beta = ol__grad_first(w) ? 0.0f : 1.0f;
    if (x->requires_grad && w->requires_grad && x != w) gemm_pair(p);
    else
        for (int i = 0; i < 2; i++)
            if ((i ? w : x)->requires_grad)
                gemmb(p[i].ta, p[i].tb, p[i].M, p[i].N, p[i].K, p[i].A, 0, p[i].B, 0, p[i].beta, p[i].C, 0, 1);
    if (bias && bias->requires_grad) {
        float *db = bias->grad;
        if (ol__grad_first(bias)) memset(db, 0, (size_t)N * 4);
        /* column sums in a fixed order: threads own column blocks, rows run serially */
        #pragma omp parallel for schedule(static) if (M * N > OL_PAR_MIN)
        for (int64_t j0 = 0; j0 < N; j0 += 64) {
            int64_t j1 = j0 + 64 < N ? j0 + 64 : N;
            for (int64_t i = 0; i < M; i++) {
                const float *r = dy + i * N;
                for (int64_t j = j0; j < j1; j++) db[j] += r[j];
            }
        }
    }
}

ol_tensor *ol_linear(ol_tensor *x, ol_tensor *w, ol_tensor *bias) {
    if (ol__check_f32("linear", x) || ol__check_f32("linear", w)) return NULL;
    if (bias && ol__check_f32("linear", bias)) return NULL;
    if (w->ndim != 2) OL_FAIL("linear: weight '%s' %s must be 2-D (out, in)", w->name, OL_SHAPE(w));
    int64_t N = w->shape[0], K = w->shape[1];
    if (ol__last(x) != K)
        OL_FAIL("linear: input '%s' %s last dim must equal weight '%s' %s in-features %lld",
                x->name, OL_SHAPE(x), w->name, OL_SHAPE(w), (long long)K);
    if (bias && (bias->ndim != 1 || bias->shape[0] != N))
        OL_FAIL("linear: bias '%s' %s must be (%lld) for weight '%s' %s", bias->name, OL_SHAPE(bias),
                (long long)N, w->name, OL_SHAPE(w));
    int64_t M = ol__rows(x);
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        OL_FAIL("linear: input '%s' %s: a dim exceeds the BLAS int range", x->name, OL_SHAPE(x));
    int64_t shape[4];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = N;
    ol_tensor *y = ol__new(x->ctx, OL_F32, x->ndim, shape, "linear");
    if (!y) return NULL;
    if (bias) {
        #pragma omp parallel for schedule(static) if (M * N > OL_PAR_MIN)
        for (int64_t i = 0; i < M; i++) memcpy(y->data + i * N, bias->data, (size_t)N * 4);
    }
    if (K > 0) gemmb(0, 1, M, N, K, x->data, 0, w->data, 0, bias ? 1.0f : 0.0f, y->data, 0, 1);
    else if (!bias) memset(y->data, 0, (size_t)y->numel * 4);
    ol_tensor *ins[3] = { x, w, bias };
    if (ol__needs_grad(x->ctx, 3, ins)) {
        ol_node *n = ol__record("linear", linear_backward, y, 3, ins);
        if (!n) return NULL;
        n->write_first = 1;
    }
    return y;
}
