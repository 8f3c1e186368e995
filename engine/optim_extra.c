/*
 * optim_extra.c — the optimizers of the 2024–2026 outlier remedies (docs/reference/training.md):
 * Muon (Newton–Schulz orthogonalised momentum, Jordan et al. 2024; Outlier-Safe Pre-Training,
 * Park et al. 2025) and OrthoAdam (Adam in a fixed rotated basis, Kaul et al. 2025), and AdamW on
 * a subset of the parameters (what Muon leaves to AdamW: embeddings, gains, biases, the head).
 *
 * State lives in the context's flat AdamW buffers: Muon's momentum in m (v unused), OrthoAdam's
 * rotated moments in m and v. So checkpoints and the MPI broadcast of optimizer state carry
 * them unchanged.
 *
 * Determinism: every product is a single-threaded sgemm (OpenBLAS set to one thread while
 * these run) in a fixed order, and elementwise loops have no reductions across threads except
 * the Frobenius norm, which is summed in double in index order: results do not depend on the
 * thread count.
 */
#include "internal.h"
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>

extern void openblas_set_num_threads(int num_threads);

/* C (m×n) = alpha·op(A)·op(B) + beta·C, row-major, single-threaded by the caller */
static void gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *Cm, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                (int)k, alpha, A, (int)lda, B, (int)ldb, beta, Cm, (int)ldc);
}

/* Newton–Schulz on X (r×c, r ≤ c, row-major) in place; scratch 2·r·r + r·c floats */
static void ns_iterate(float *X, int64_t r, int64_t c, int32_t steps, const float *coef, float *scratch) {
    float a = coef[0], b = coef[1], cc = coef[2];
    float *A = scratch, *Bm = A + r * r, *Y = Bm + r * r;
    double s = 0;
    for (int64_t i = 0; i < r * c; i++) s += (double)X[i] * X[i];
    float inv = (float)(1.0 / (sqrt(s) + 1e-7));
    for (int64_t i = 0; i < r * c; i++) X[i] *= inv;
    for (int32_t it = 0; it < steps; it++) {
        gemm(0, 1, r, r, c, 1.0f, X, c, X, c, 0.0f, A, r);            /* A = X·Xᵀ */
        memcpy(Bm, A, (size_t)(r * r) * 4);
        gemm(0, 0, r, r, r, cc, A, r, A, r, b, Bm, r);                /* B = b·A + c·A·A */
        memcpy(Y, X, (size_t)(r * c) * 4);
        gemm(0, 0, r, c, r, 1.0f, Bm, r, Y, c, a, X, c);              /* X = a·X + B·X */
    }
}

static const float MUON_COEF[3] = { 3.4445f, -4.7750f, 2.0315f };

int ol_newton_schulz(const float *g, int64_t rows, int64_t cols, int32_t steps, const float *coef, float *out) {
    if (!g || !out || rows < 1 || cols < 1 || steps < 0)
        OL_FAIL_INT("newton_schulz: bad arguments (rows %lld, cols %lld, steps %d)", (long long)rows,
                    (long long)cols, steps);
    if (!coef) coef = MUON_COEF;
    int tr = rows > cols;
    int64_t r = tr ? cols : rows, c = tr ? rows : cols;
    float *X = malloc((size_t)(r * c + 2 * r * r + r * c) * 4);
    if (!X) OL_FAIL_INT("newton_schulz: out of memory for a %lldx%lld matrix", (long long)rows, (long long)cols);
    if (tr) { for (int64_t i = 0; i < rows; i++) for (int64_t j = 0; j < cols; j++) X[j * rows + i] = g[i * cols + j]; }
    else memcpy(X, g, (size_t)(rows * cols) * 4);
    openblas_set_num_threads(1);
    ns_iterate(X, r, c, steps, coef, X + r * c);
    openblas_set_num_threads(ol_get_num_threads());
    if (tr) { for (int64_t i = 0; i < rows; i++) for (int64_t j = 0; j < cols; j++) out[i * cols + j] = X[j * rows + i]; }
    else memcpy(out, X, (size_t)(rows * cols) * 4);
    free(X);
    return 0;
}

static int check_idx(const char *op, ol_ctx *c, int32_t n, const int32_t *idx, int32_t ngroups) {
    if (n < 0 || (n > 0 && !idx)) OL_FAIL_INT("%s: bad parameter list", op);
    for (int32_t i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= c->nparams)
            OL_FAIL_INT("%s: parameter index %d out of range (%d parameters)", op, idx[i], c->nparams);
        if (ngroups > 0 && c->ptab[idx[i]].group >= ngroups)
            OL_FAIL_INT("%s: parameter '%s' is in group %d but only %d groups were given", op,
                        c->ptab[idx[i]].t->name, c->ptab[idx[i]].group, ngroups);
    }
    return 0;
}

/* the (rows, cols) matrix view of a parameter: (numel/last, last); 1-D: (1, n) */
static void mat_view(const ol_tensor *t, int64_t *rows, int64_t *cols) {
    *cols = t->shape[t->ndim - 1];
    *rows = t->numel / *cols;
}

/*
 * Muon on parameters idx[0..n), each seen as a (rows, cols) matrix (numel/last, last):
 *   m = μ·m + (1−μ)·g                         (m: the AdamW m buffer)
 *   u = (1−μ)·g + μ·m  (nesterov)  or  u = m
 *   O = NewtonSchulz_steps(u)                 (Muon's quintic coefficients)
 *   p -= lr·( k·O + wd·p ),  k = sqrt(max(1, rows/cols))   (scale_mode 0: Keller Jordan's `muon_update`)
 *                           k = 0.2·sqrt(max(rows, cols))   (scale_mode 1: Moonlight's, an update RMS
 *                                                           ≈ 0.2 like AdamW's, so AdamW's lr carries over)
 * (Jordan's reference: momentum 0.95, nesterov, 5 steps).
 */
int ol_muon_step(ol_ctx *c, int32_t n, const int32_t *idx, float lr, float mu, int32_t nesterov, int32_t steps,
                 float wd, int32_t scale_mode) {
    if (check_idx("muon", c, n, idx, 0)) return -1;
    if (!(mu >= 0.0f && mu < 1.0f) || steps < 0) OL_FAIL_INT("muon: momentum %g must be in [0, 1), steps >= 0", (double)mu);
    int64_t maxn = 0, maxr = 0;
    for (int32_t i = 0; i < n; i++) {
        int64_t rows, cols;
        mat_view(c->ptab[idx[i]].t, &rows, &cols);
        int64_t r = rows < cols ? rows : cols;
        if (rows * cols > maxn) maxn = rows * cols;
        if (r > maxr) maxr = r;
    }
    float *U = malloc((size_t)(3 * maxn + 2 * maxr * maxr + 16) * 4);   /* U, X, scratch (2r² + r·c) */
    if (!U) OL_FAIL_INT("muon: out of memory");
    float *X = U + maxn, *scr = X + maxn;
    openblas_set_num_threads(1);
    for (int32_t i = 0; i < n; i++) {
        ol_param_info *pi = &c->ptab[idx[i]];
        int64_t rows, cols, off = pi->offset;
        mat_view(pi->t, &rows, &cols);
        int64_t N = rows * cols;
        float *p = c->params + off, *g = c->grads + off, *m = c->adam_m + off;
        for (int64_t j = 0; j < N; j++) {
            m[j] = mu * m[j] + (1.0f - mu) * g[j];
            U[j] = nesterov ? (1.0f - mu) * g[j] + mu * m[j] : m[j];
        }
        int tr = rows > cols;
        int64_t r = tr ? cols : rows, cc = tr ? rows : cols;
        if (tr) { for (int64_t a = 0; a < rows; a++) for (int64_t b = 0; b < cols; b++) X[b * rows + a] = U[a * cols + b]; }
        else memcpy(X, U, (size_t)N * 4);
        ns_iterate(X, r, cc, steps, MUON_COEF, scr);
        float scale = scale_mode == 1 ? 0.2f * sqrtf((float)(rows > cols ? rows : cols))
                    : rows > cols ? sqrtf((float)rows / (float)cols) : 1.0f;
        for (int64_t a = 0; a < rows; a++)
            for (int64_t b = 0; b < cols; b++) {
                float o = tr ? X[b * rows + a] : X[a * cols + b];
                float *pj = p + a * cols + b;
                *pj -= lr * (scale * o + wd * *pj);
            }
    }
    openblas_set_num_threads(ol_get_num_threads());
    free(U);
    return 0;
}

/* AdamW on parameters idx[0..n) only, with exactly ol_adamw_step's formula (engine/optim.c) */
int ol_adamw_step_some(ol_ctx *c, int32_t n, const int32_t *idx, float lr, float beta1, float beta2, float eps,
                       int32_t ngroups, const float *lr_scale, const float *wd, int64_t step) {
    if (step < 1) OL_FAIL_INT("adamw_some: step %lld must be >= 1", (long long)step);
    if (check_idx("adamw_some", c, n, idx, ngroups)) return -1;
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    for (int32_t i = 0; i < n; i++) {
        ol_param_info *pi = &c->ptab[idx[i]];
        int64_t off = pi->offset, N = pi->t->numel;
        int32_t g = pi->group;
        float lrg = lr * (lr_scale ? lr_scale[g] : 1.0f), wdg = wd ? wd[g] : 0.0f;
        float *p = c->params + off, *gr = c->grads + off, *m = c->adam_m + off, *v = c->adam_v + off;
        #pragma omp parallel for schedule(static) if (N > OL_PAR_MIN)
        for (int64_t j = 0; j < N; j++) {
            float gj = gr[j];
            m[j] = beta1 * m[j] + (1.0f - beta1) * gj;
            v[j] = beta2 * v[j] + (1.0f - beta2) * gj * gj;
            float mh = m[j] / bc1, vh = v[j] / bc2;
            p[j] -= lrg * (mh / (sqrtf(vh) + eps) + wdg * p[j]);
        }
    }
    return 0;
}

/*
 * OrthoAdam: parameter idx[i] seen as G (rows, cols) (numel/last, last); qa[i] (rows×rows) and
 * qb[i] (cols×cols) orthogonal, or NULL for the identity on that side (no product at all):
 *   G̃ = Qa·G·Qbᵀ;  m = β1·m + (1−β1)·G̃;  v = β2·v + (1−β2)·G̃²     (m, v: the AdamW buffers)
 *   Ũ = m̂/(√v̂ + ε);  U = Qaᵀ·Ũ·Qb;  p -= lr_g·(U + wd_g·p)
 * The rotation Qa ⊗ Qb is orthogonal on vec(G): Adam's per-coordinate scaling acts in a fixed
 * rotated basis (Kaul et al. 2025), with a Kronecker-factored rotation so that a (rows, cols)
 * weight needs rows² + cols² floats instead of (rows·cols)². With identity matrices every
 * product is exact, so the step equals ol_adamw_step bit for bit.
 */
int ol_orthoadam_step(ol_ctx *c, int32_t n, const int32_t *idx, ol_tensor **qa, ol_tensor **qb, float lr,
                      float beta1, float beta2, float eps, int32_t ngroups, const float *lr_scale, const float *wd,
                      int64_t step) {
    if (step < 1) OL_FAIL_INT("orthoadam: step %lld must be >= 1", (long long)step);
    if (check_idx("orthoadam", c, n, idx, ngroups)) return -1;
    int64_t maxn = 0;
    for (int32_t i = 0; i < n; i++) {
        ol_tensor *t = c->ptab[idx[i]].t;
        int64_t rows, cols;
        mat_view(t, &rows, &cols);
        if (t->numel > maxn) maxn = t->numel;
        ol_tensor *a = qa ? qa[i] : NULL, *b = qb ? qb[i] : NULL;
        if (a && (ol__check_f32("orthoadam", a) || a->ndim != 2 || a->shape[0] != rows || a->shape[1] != rows))
            OL_FAIL_INT("orthoadam: rotation for '%s' must be (%lld,%lld), got %s", t->name, (long long)rows,
                        (long long)rows, OL_SHAPE(a));
        if (b && (ol__check_f32("orthoadam", b) || b->ndim != 2 || b->shape[0] != cols || b->shape[1] != cols))
            OL_FAIL_INT("orthoadam: rotation for '%s' must be (%lld,%lld), got %s", t->name, (long long)cols,
                        (long long)cols, OL_SHAPE(b));
    }
    float *W = malloc((size_t)(2 * maxn + 16) * 4);
    if (!W) OL_FAIL_INT("orthoadam: out of memory");
    float *T1 = W, *T2 = W + maxn;
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    openblas_set_num_threads(1);
    for (int32_t i = 0; i < n; i++) {
        ol_param_info *pi = &c->ptab[idx[i]];
        int64_t rows, cols, off = pi->offset, N = pi->t->numel;
        mat_view(pi->t, &rows, &cols);
        ol_tensor *a = qa ? qa[i] : NULL, *b = qb ? qb[i] : NULL;
        int32_t g = pi->group;
        float lrg = lr * (lr_scale ? lr_scale[g] : 1.0f), wdg = wd ? wd[g] : 0.0f;
        float *p = c->params + off, *gr = c->grads + off, *m = c->adam_m + off, *v = c->adam_v + off;
        /* G̃ = Qa·G·Qbᵀ into T1 */
        const float *src = gr;
        if (a) { gemm(0, 0, rows, cols, rows, 1.0f, a->data, rows, src, cols, 0.0f, T2, cols); src = T2; }
        if (b) gemm(0, 1, rows, cols, cols, 1.0f, src, cols, b->data, cols, 0.0f, T1, cols);
        else memcpy(T1, src, (size_t)N * 4);
        for (int64_t j = 0; j < N; j++) {
            float gj = T1[j];
            m[j] = beta1 * m[j] + (1.0f - beta1) * gj;
            v[j] = beta2 * v[j] + (1.0f - beta2) * gj * gj;
            float mh = m[j] / bc1, vh = v[j] / bc2;
            T1[j] = mh / (sqrtf(vh) + eps);
        }
        /* U = Qaᵀ·Ũ·Qb */
        src = T1;
        if (a) { gemm(1, 0, rows, cols, rows, 1.0f, a->data, rows, src, cols, 0.0f, T2, cols); src = T2; }
        if (b) { float *dst = src == T1 ? T2 : T1; gemm(0, 0, rows, cols, cols, 1.0f, src, cols, b->data, cols, 0.0f, dst, cols); src = dst; }
        for (int64_t j = 0; j < N; j++) p[j] -= lrg * (src[j] + wdg * p[j]);
    }
    openblas_set_num_threads(ol_get_num_threads());
    free(W);
    return 0;
}

/* q (n, n) = a random orthogonal matrix: the Q of the QR factorisation of an N(0,1) matrix drawn
 * with seed (modified Gram–Schmidt in double, applied twice for orthogonality to rounding) */
int ol_random_orthogonal(ol_tensor *q, uint64_t seed) {
    if (ol__check_f32("random_orthogonal", q)) return -1;
    if (q->ndim != 2 || q->shape[0] != q->shape[1])
        OL_FAIL_INT("random_orthogonal: '%s' %s must be square", q->name, OL_SHAPE(q));
    int64_t n = q->shape[0];
    double *A = malloc((size_t)(n * n) * 8);
    if (!A) OL_FAIL_INT("random_orthogonal: out of memory for n = %lld", (long long)n);
    /* Box–Muller on the engine's counter-based uniforms: column j = row j of A */
    for (int64_t i = 0; i < n * n; i++) {
        double u1 = ol_rand_uniform(seed, 2 * (uint64_t)i), u2 = ol_rand_uniform(seed, 2 * (uint64_t)i + 1);
        A[i] = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
    }
    for (int pass = 0; pass < 2; pass++)
        for (int64_t j = 0; j < n; j++) {
            double *aj = A + j * n;
            for (int64_t k = 0; k < j; k++) {
                double *ak = A + k * n, d = 0;
                for (int64_t t = 0; t < n; t++) d += aj[t] * ak[t];
                for (int64_t t = 0; t < n; t++) aj[t] -= d * ak[t];
            }
            double s = 0;
            for (int64_t t = 0; t < n; t++) s += aj[t] * aj[t];
            s = 1.0 / sqrt(s);
            for (int64_t t = 0; t < n; t++) aj[t] *= s;
        }
    /* rows of A are orthonormal: q = A (q·qᵀ = I) */
    for (int64_t i = 0; i < n * n; i++) q->data[i] = (float)A[i];
    free(A);
    return 0;
}
