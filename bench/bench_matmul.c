/*
 * bench_matmul.c — the engine's matmuls against raw cblas_sgemm on this machine, in the
 * same run, for the linear layers of one GPT-2-small block (B·T = 4096 rows, d = 768,
 * 4d = 3072), and the forward+backward of one MLP block against the measured sgemm peak.
 *
 * For a linear layer y = x·Wᵀ with x (M,K), W (N,K), y (M,N), M = B·T = 4096:
 *   forward   y  = x·Wᵀ     engine: ol_linear(x, W, NULL)       sgemm(NoTrans, Trans)  M,N,K
 *   backward  dX = dY·W     engine: ol_matmul(dY, W, 0, 0)      sgemm(NoTrans, NoTrans) M,K,N
 *   backward  dW = dYᵀ·X    engine: ol_matmul(dY, X, 1, 0)      sgemm(Trans, NoTrans)   N,K,M
 * (linear_backward in engine/ops_matmul.c issues exactly these two products, with beta = 1.)
 * Layers: qkv 768→2304, attn proj 768→768, fc 768→3072, mlp proj 3072→768.
 * Each product is 2·M·N·K flops. Every measurement: one warm-up, then REPS timed runs with
 * engine and sgemm alternating (so a load change on a shared machine hits both), median.
 *
 * MLP block: h = LN(x); u = h·W1ᵀ + b1 (768→3072); a = GELU_tanh(u); y = a·W2ᵀ + b2
 * (3072→768); loss = mean(y). Forward + ol_backward, timed as one; flops counted are the
 * six matmuls only (2 forward + 4 backward = 6·2·M·768·3072), so the achieved GFLOP/s is
 * a lower bound on the machine's work and is compared with the best sgemm rate above.
 *
 * Usage: build/bench/bench_matmul [reps]   (default 5; OMP_NUM_THREADS sets the threads)
 */
#define _POSIX_C_SOURCE 200809L
#include "outlierlab.h"
#include <unistd.h>
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what) {
    fprintf(stderr, "bench_matmul: %s: %s\n", what, ol_error());
    exit(1);
}

static float *fmalloc(int64_t n, uint64_t seed) {
    float *p = malloc((size_t)n * sizeof *p);
    if (!p) { fprintf(stderr, "bench_matmul: out of memory (%lld floats)\n", (long long)n); exit(1); }
    for (int64_t i = 0; i < n; i++) p[i] = (float)(ol_rand_uniform(seed, (uint64_t)i) - 0.5);
    return p;
}

enum { FWD, DX, DW };
static const char *kind_name[] = { "fwd  y=x·Wᵀ", "bwd dX=dY·W", "bwd dW=dYᵀ·X" };

typedef struct { const char *layer; int64_t K, N; } layer_t;

/* raw sgemm of one product; the operands are the same matrices the engine gets */
static void raw(int kind, int64_t M, int64_t N, int64_t K, const float *X, const float *W,
                const float *dY, float *out) {
    switch (kind) {
    case FWD:   /* y (M,N) = X (M,K) · Wᵀ */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, X, (int)K, W, (int)K, 0.0f, out, (int)N);
        break;
    case DX:    /* dX (M,K) = dY (M,N) · W (N,K) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)K, (int)N, 1.0f, dY, (int)N, W, (int)K, 0.0f, out, (int)K);
        break;
    default:    /* dW (N,K) = dYᵀ (N,M) · X (M,K) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)N, (int)K, (int)M, 1.0f, dY, (int)N, X, (int)K, 0.0f, out, (int)K);
        break;
    }
}

static void engine(ol_ctx *ctx, int kind, ol_tensor *x, ol_tensor *w, ol_tensor *dy) {
    ol_tensor *r = kind == FWD ? ol_linear(x, w, NULL)
                 : kind == DX  ? ol_matmul(dy, w, 0, 0)
                               : ol_matmul(dy, x, 1, 0);
    if (!r) die(kind_name[kind]);
    ol_step_reset(ctx);
}

int main(int argc, char **argv) {
    const char *core = ol_blas_core_hint();       /* OpenBLAS fell back to old kernels: engine/blas.c */
    if (core) { setenv("OPENBLAS_CORETYPE", core, 1); execv("/proc/self/exe", argv); }
    printf("OpenBLAS kernels: %s (%s)\n", ol_blas_core(), ol_blas_config());
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1) reps = 1;
    const int64_t M = 4096, D = 768, F = 3072;
    layer_t layers[] = { { "attn qkv  768->2304", D, 3 * D }, { "attn proj 768->768 ", D, D },
                         { "mlp fc    768->3072", D, F },     { "mlp proj 3072->768 ", F, D } };
    int nl = (int)(sizeof layers / sizeof layers[0]);

    ol_ctx *ctx = ol_ctx_new((int64_t)1 << 24, (int64_t)1 << 31);
    if (!ctx) die("ctx");
    printf("outlierlab bench_matmul: B·T = %lld, d = %lld, 4d = %lld; threads %d; median of %d reps (1 warm-up)\n",
           (long long)M, (long long)D, (long long)F, ol_get_num_threads(), reps);
    printf("(the machine may be shared: a busy neighbour lowers both columns; the ratio is what counts)\n\n");
    printf("%-20s %-13s %6s %6s %6s %11s %11s %7s\n", "layer", "product", "M", "N", "K",
           "sgemm GF/s", "engine GF/s", "ratio");

    double peak = 0, worst_ratio = 1e9, t_raw_all = 0, t_eng_all = 0, fl_all = 0;
    double *tr = malloc(sizeof(double) * reps), *te = malloc(sizeof(double) * reps);
    for (int l = 0; l < nl; l++) {
        int64_t K = layers[l].K, N = layers[l].N;
        /* persistent operands: x (M,K), W (N,K), dY (M,N) */
        int64_t xs[2] = { M, K }, ws[2] = { N, K }, ys[2] = { M, N };
        ol_tensor *x = ol_tensor_new_persistent(ctx, OL_F32, 2, xs, "x");
        ol_tensor *w = ol_tensor_new_persistent(ctx, OL_F32, 2, ws, "W");
        ol_tensor *dy = ol_tensor_new_persistent(ctx, OL_F32, 2, ys, "dY");
        if (!x || !w || !dy) die("operands");
        ol_fill_uniform(x, -1, 1, 1); ol_fill_uniform(w, -0.05f, 0.05f, 2); ol_fill_uniform(dy, -1, 1, 3);
        int64_t big = M * (N > K ? N : K);                  /* M·N or M·K, each > N·K here */
        float *out = fmalloc(big, 4);
        for (int kind = FWD; kind <= DW; kind++) {
            int64_t m = kind == DW ? N : M, n = kind == FWD ? N : K, k = kind == FWD ? K : kind == DX ? N : M;
            double flops = 2.0 * (double)m * (double)n * (double)k;
            raw(kind, M, N, K, x->data, w->data, dy->data, out);      /* warm-up */
            engine(ctx, kind, x, w, dy);
            for (int r = 0; r < reps; r++) {
                double t0 = now();
                raw(kind, M, N, K, x->data, w->data, dy->data, out);
                double t1 = now();
                engine(ctx, kind, x, w, dy);
                double t2 = now();
                tr[r] = t1 - t0;
                te[r] = t2 - t1;
            }
            double mr = median(tr, reps), me = median(te, reps);
            double gr = flops / mr * 1e-9, ge = flops / me * 1e-9;
            if (gr > peak) peak = gr;
            if (ge / gr < worst_ratio) worst_ratio = ge / gr;
            t_raw_all += mr; t_eng_all += me; fl_all += flops;
            printf("%-20s %-13s %6lld %6lld %6lld %11.1f %11.1f %7.3f\n", layers[l].layer, kind_name[kind],
                   (long long)m, (long long)n, (long long)k, gr, ge, ge / gr);
            fflush(stdout);
        }
        free(out);
    }
    printf("%-20s %-13s %6s %6s %6s %11.1f %11.1f %7.3f\n", "all 12 products", "(time-weighted)", "", "", "",
           fl_all / t_raw_all * 1e-9, fl_all / t_eng_all * 1e-9, t_raw_all / t_eng_all);
    printf("worst engine/sgemm ratio %.3f (target >= 0.95); sgemm peak in this run %.1f GFLOP/s\n\n",
           worst_ratio, peak);

    /* ---------------------------------------------------------------- MLP block */
    int64_t xs[2] = { M, D }, w1s[2] = { F, D }, b1s[1] = { F }, w2s[2] = { D, F }, b2s[1] = { D }, cs[1] = { D };
    ol_tensor *X = ol_tensor_new_persistent(ctx, OL_F32, 2, xs, "x");
    ol_tensor *g = ol_param(ctx, "ln.weight", 1, cs), *b = ol_param(ctx, "ln.bias", 1, cs);
    ol_tensor *W1 = ol_param(ctx, "fc.weight", 2, w1s), *B1 = ol_param(ctx, "fc.bias", 1, b1s);
    ol_tensor *W2 = ol_param(ctx, "proj.weight", 2, w2s), *B2 = ol_param(ctx, "proj.bias", 1, b2s);
    if (!X || !g || !b || !W1 || !B1 || !W2 || !B2) die("mlp params");
    ol_fill_normal(X, 0, 1, 11); ol_fill(g, 1); ol_fill(b, 0);
    ol_fill_normal(W1, 0, 0.02f, 12); ol_fill(B1, 0); ol_fill_normal(W2, 0, 0.02f, 13); ol_fill(B2, 0);
    ol_tensor_set_requires_grad(X, 1);   /* the block's input gradient, as inside a network */
    int64_t one[1] = { M * D };
    double tf[64], tb[64], tt[64], s_ln[64], s_fc[64], s_gelu[64], s_proj[64];
    int mreps = reps > 64 ? 64 : reps;
    for (int r = -1; r < mreps; r++) {   /* r = -1: warm-up */
        ol_zero_grad(ctx);
        ol_tensor_zero_grad(X);
        double t0 = now();
        ol_tensor *h = ol_layernorm(X, g, b, 1e-5f);
        double ta = now();
        ol_tensor *u = ol_linear(h, W1, B1);
        double tb_ = now();
        ol_tensor *a = ol_unary(u, OL_GELU_TANH);
        double tc = now();
        ol_tensor *y = ol_linear(a, W2, B2);
        double td = now();
        ol_tensor *loss = ol_mean(ol_reshape(y, 1, one));
        if (!loss) die("mlp forward");
        double t1 = now();
        if (r >= 0) { s_ln[r] = ta - t0; s_fc[r] = tb_ - ta; s_gelu[r] = tc - tb_; s_proj[r] = td - tc; }
        if (ol_backward(loss) != 0) die("mlp backward");
        double t2 = now();
        ol_step_reset(ctx);
        if (r >= 0) { tf[r] = t1 - t0; tb[r] = t2 - t1; tt[r] = t2 - t0; }
    }
    double mf = median(tf, mreps), mb = median(tb, mreps), mt = median(tt, mreps);
    double mm = 2.0 * M * D * F;   /* one of the six matmuls */
    printf("MLP block (LN -> fc 768->3072 -> GELU -> proj 3072->768), B·T = %lld, forward + backward:\n", (long long)M);
    printf("  forward  %8.2f ms  %7.1f GFLOP/s (2 matmuls)\n", mf * 1e3, 2 * mm / mf * 1e-9);
    printf("  backward %8.2f ms  %7.1f GFLOP/s (4 matmuls)\n", mb * 1e3, 4 * mm / mb * 1e-9);
    printf("  total    %8.2f ms  %7.1f GFLOP/s = %.3f of the sgemm peak %.1f GFLOP/s measured above\n",
           mt * 1e3, 6 * mm / mt * 1e-9, 6 * mm / mt * 1e-9 / peak, peak);
    printf("  (flops counted: matmuls only; LayerNorm, GELU, bias and the loss add memory-bound work)\n");
    printf("  forward by op: LN %.2f ms, fc+bias %.2f ms (%.1f GFLOP/s), GELU %.2f ms, proj+bias %.2f ms (%.1f GFLOP/s)\n",
           median(s_ln, mreps) * 1e3, median(s_fc, mreps) * 1e3, mm / median(s_fc, mreps) * 1e-9,
           median(s_gelu, mreps) * 1e3, median(s_proj, mreps) * 1e3, mm / median(s_proj, mreps) * 1e-9);
    free(tr); free(te);
    ol_ctx_free(ctx);
    return 0;
}
