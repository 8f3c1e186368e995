/*
 * bench_optim.c — the optimizer phase of a training step (what train.run does after the
 * backward: the global gradient norm, clipping, AdamW) on gpt2-124m's parameter layout (99
 * tensors, 124.4 M floats) and on one bare tensor of the same size, in the same run.
 *
 * Phase = ol_grad_norm + ol_grad_scale (the clip factor, applied when < 1) + ol_adamw_step,
 * as separate calls (the way train.lua issued them until the clip factor was folded into the
 * update), and "fused": ol_grad_norm + ol_adamw_step_scaled (what train.run does now). The gradients are refilled before every repetition
 * (untimed) so that clipping really scales them. Minor page faults are counted per phase:
 * the first AdamW step touches the lazily-zeroed moment buffers (every page faults twice:
 * the read maps the zero page, the write copies it); later steps must not fault.
 *
 * Usage: build/bench/bench_optim [reps] [scale]   (default 5 reps; scale divides every size,
 *        e.g. 64 for a callgrind run: valgrind --tool=callgrind build/bench/bench_optim 2 64)
 */
#define _POSIX_C_SOURCE 200809L
#include "outlierlab.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static long minflt(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt;
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
    fprintf(stderr, "bench_optim: %s: %s\n", what, ol_error());
    exit(1);
}

/* gradients of a plausible size (|g| ~ 1e-3, so the global norm is > 1 and clipping applies) */
static void fill_grads(ol_ctx *c, uint64_t seed) {
    float *g = ol_grads_data(c);
    int64_t n = ol_params_numel(c);
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) g[i] = (float)(ol_rand_uniform(seed, (uint64_t)i) - 0.5) * 2e-3f;
}

typedef struct { double norm, scale, adamw, phase, fused; long faults_first, faults_later; } result;

static result run(const char *label, int model_layout, int reps, int64_t scale) {
    ol_ctx *c = ol_ctx_new((int64_t)1 << 27, (int64_t)1 << 26);
    if (!c) die("ctx");
    int64_t V = 50304, D = 768, F = 3072, L = 12, T = 1024;
    if (model_layout) {
        /* gpt2-124m as models.build lays it out (no biases): wte, wpe, per block ln1, q, k,
         * v, o, ln2, fc, proj; ln_f */
        int64_t s[2];
        s[0] = V / scale; s[1] = D; if (!ol_param(c, "wte", 2, s)) die("param");
        s[0] = T / scale; if (!ol_param(c, "wpe", 2, s)) die("param");
        for (int l = 0; l < L; l++) {
            s[0] = D / scale; if (!ol_param(c, "ln1", 1, s)) die("param");
            s[0] = D / scale; s[1] = D;
            for (int k = 0; k < 4; k++) if (!ol_param(c, "attn", 2, s)) die("param");
            s[0] = D / scale; if (!ol_param(c, "ln2", 1, s)) die("param");
            s[0] = F / scale; s[1] = D; if (!ol_param(c, "fc", 2, s)) die("param");
            s[0] = D / scale; s[1] = F; if (!ol_param(c, "proj", 2, s)) die("param");
        }
        s[0] = D / scale; if (!ol_param(c, "ln_f", 1, s)) die("param");
    } else {
        int64_t s[1] = { (int64_t)124373760 / scale };
        if (!ol_param(c, "bare", 1, s)) die("param");
    }
    /* the 1-D tensors in group 1 (no decay), as optim.lua assigns them */
    for (int32_t i = 0; i < ol_param_count(c); i++) {
        ol_tensor *p = ol_param_get(c, i);
        ol_param_set_group(p, p->ndim >= 2 ? 0 : 1);
        ol_fill_normal(p, 0, 0.02f, (uint64_t)i + 1);
    }
    float lr_scale[2] = { 1, 1 }, wd[2] = { 0.1f, 0 };
    double *tn = calloc(reps, 8), *ts = calloc(reps, 8), *ta = calloc(reps, 8), *tp = calloc(reps, 8), *tf = calloc(reps, 8);
    result r = { 0 };
    int64_t step = 0;
    for (int rep = -1; rep < reps; rep++) {         /* rep -1: the first step (page faults) */
        fill_grads(c, 100 + (uint64_t)rep);
        long f0 = minflt();
        double t0 = now();
        float n = ol_grad_norm(c);
        double t1 = now();
        float f = 1.0f / (n + 1e-6f);
        if (f < 1) ol_grad_scale(c, f);
        double t2 = now();
        if (ol_adamw_step(c, 1e-4f, 0.9f, 0.95f, 1e-8f, 2, lr_scale, wd, ++step) != 0) die("adamw");
        double t3 = now();
        ol_step_reset(c);
        long f1 = minflt();
        if (rep < 0) { r.faults_first = f1 - f0; continue; }
        r.faults_later += f1 - f0;
        tn[rep] = t1 - t0; ts[rep] = t2 - t1; ta[rep] = t3 - t2; tp[rep] = t3 - t0;
#ifndef NO_FUSED
        fill_grads(c, 100 + (uint64_t)rep);
        double t4 = now();
        float gn = ol_grad_norm(c), gf = 1.0f / (gn + 1e-6f);
        if (ol_adamw_step_scaled(c, gf < 1 ? gf : 1.0f, 1e-4f, 0.9f, 0.95f, 1e-8f, 2, lr_scale, wd, ++step) != 0)
            die("adamw_scaled");
        tf[rep] = now() - t4;
        ol_step_reset(c);
#endif
    }
    r.norm = median(tn, reps); r.scale = median(ts, reps); r.adamw = median(ta, reps);
    r.phase = median(tp, reps); r.fused = median(tf, reps);
    double n = (double)ol_params_numel(c);
    printf("%-22s %5d tensors %6.1f M floats | norm %.3f s  scale %.3f s  adamw %.3f s  = %.3f s "
           "(%.1f GB/s over 10 passes) | fused clip+adamw %.3f s (%.1f GB/s over 8 passes) | "
           "page faults: first step %ld, later steps %ld\n",
           label, ol_param_count(c), n / 1e6, r.norm, r.scale, r.adamw, r.phase,
           10 * 4 * n / r.phase / 1e9, r.fused, 8 * 4 * n / r.fused / 1e9, r.faults_first, r.faults_later);
    free(tn); free(ts); free(ta); free(tp); free(tf);
    ol_ctx_free(c);
    return r;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    int64_t scale = argc > 2 ? atoll(argv[2]) : 1;
    if (reps < 1) reps = 1;
    if (scale < 1) scale = 1;
    printf("== optimizer phase (global norm, clip, AdamW) at gpt2-124m's size / %lld, threads %d, median of %d ==\n",
           (long long)scale, ol_get_num_threads(), reps);
    run("gpt2-124m layout", 1, reps, scale);
    run("one bare tensor", 0, reps, scale);
    return 0;
}
