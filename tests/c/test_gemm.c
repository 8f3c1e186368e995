/*
 * test_gemm.c — the engine's own kernel for small products (engine/gemm.c) gives the bits of
 * OpenBLAS: every product below is computed by the engine ops with the kernel on and with it
 * off (ol_set_gemm_fast(0): every product through cblas_sgemm, as before the kernel existed),
 * and the outputs and gradients must agree bit for bit. The shapes are the model organism's
 * (row tiles of x·Wᵀ, dx = dy·W, K-chunked dW = dyᵀ·x, attention blocks with a scale), odd
 * and tiny shapes (edge registers, rows left after the 6-row panels, K below 8 and not a
 * multiple of 8, K blocks of OpenBLAS's driver), batched products and strided operands.
 * On a machine where the kernel can serve the organism (AVX-512 and the OpenBLAS kernels it
 * calibrates against) it must also be the one used for them.
 */
#include "tap.h"
#include "outlierlab.h"
#include <stdlib.h>
#include <string.h>

static ol_ctx *ctx;

static ol_tensor *leaf(int nd, const int64_t *shape, uint64_t seed, const char *name) {
    ol_tensor *t = ol_tensor_new_persistent(ctx, OL_F32, nd, shape, name);
    ol_fill_uniform(t, -1.0f, 1.0f, seed);
    ol_tensor_set_requires_grad(t, 1);
    return t;
}

/* y = op(f(a, b)); loss = Σ y ⊙ R; the bits of y and of both gradients, as one buffer */
typedef ol_tensor *(*opfn)(ol_tensor *, ol_tensor *, void *);
static float *run(opfn f, ol_tensor *a, ol_tensor *b, void *arg, int64_t *n) {
    ol_step_reset(ctx);
    ol_tensor_zero_grad(a);
    ol_tensor_zero_grad(b);
    ol_tensor *y = f(a, b, arg);
    if (!y) { printf("# op failed: %s\n", ol_error()); return NULL; }
    ol_tensor *r = ol_tensor_new(ctx, OL_F32, y->ndim, y->shape, "R");
    ol_fill_uniform(r, -1.0f, 1.0f, 99);
    int64_t one = y->numel;
    ol_tensor *loss = ol_sum(ol_reshape(ol_mul(y, r), 1, &one));
    if (!loss || ol_backward(loss) != 0) { printf("# backward failed: %s\n", ol_error()); return NULL; }
    *n = y->numel + a->numel + b->numel;
    float *out = malloc((size_t)*n * 4);
    memcpy(out, y->data, (size_t)y->numel * 4);
    memcpy(out + y->numel, ol_tensor_grad(a), (size_t)a->numel * 4);
    memcpy(out + y->numel + a->numel, ol_tensor_grad(b), (size_t)b->numel * 4);
    return out;
}

static void same_bits(const char *name, opfn f, ol_tensor *a, ol_tensor *b, void *arg) {
    int64_t n0 = 0, n1 = 0;
    int old = ol_set_gemm_fast(0);
    float *ref = run(f, a, b, arg, &n0);
    ol_set_gemm_fast(1);
    float *got = run(f, a, b, arg, &n1);
    ol_set_gemm_fast(old);
    int64_t bad = -1;
    if (ref && got && n0 == n1)
        for (int64_t i = 0; i < n0; i++) if (memcmp(&ref[i], &got[i], 4) != 0) { bad = i; break; }
    char msg[160];
    snprintf(msg, sizeof msg, "%s: output and gradients bit for bit with the kernel on and off", name);
    if (!ok(ref && got && n0 == n1 && bad < 0, msg) && bad >= 0)
        printf("# first difference at %lld: %a vs %a\n", (long long)bad, ref[bad], got[bad]);
    free(ref);
    free(got);
}

static ol_tensor *f_linear(ol_tensor *x, ol_tensor *w, void *arg) { (void)arg; return ol_linear(x, w, NULL); }
typedef struct { int ta, tb; } tr;
static ol_tensor *f_matmul(ol_tensor *a, ol_tensor *b, void *arg) { tr *t = arg; return ol_matmul(a, b, t->ta, t->tb); }
/* attention over q = a, k = v = b (B, NH, T, HD), causal */
static ol_tensor *f_attn(ol_tensor *q, ol_tensor *kv, void *arg) {
    (void)arg;
    ol_attn_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = OL_ATTN_SOFTMAX;
    cfg.causal = 1;
    return ol_attention(q, kv, kv, NULL, NULL, NULL, &cfg);
}

int main(void) {
    ol_set_num_threads(2);
    ctx = ol_ctx_new(1 << 20, (int64_t)1 << 30);

    /* the organism's linears: x (B·T = 2048, C) with W (N, K) */
    struct { int64_t M, K, N; const char *what; } lin[] = {
        { 2048, 64, 64, "q/k/v/o 2048×64·(64×64)ᵀ" }, { 2048, 64, 256, "gate/up 2048×64·(256×64)ᵀ" },
        { 2048, 256, 64, "down 2048×256·(64×256)ᵀ" }, { 2048, 64, 128, "head 2048×64·(128×64)ᵀ" },
        { 37, 29, 13, "odd 37×29·(13×29)ᵀ" }, { 5, 385, 77, "K = 385 (two K blocks) 5×385·(77×385)ᵀ" },
        { 300, 7, 33, "K = 7 300×7·(33×7)ᵀ" }, { 61, 700, 18, "K = 700 (three K blocks) 61×700·(18×700)ᵀ" },
        { 1, 16, 1, "1×16·(1×16)ᵀ" },
    };
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        int64_t xs[2] = { lin[i].M, lin[i].K }, ws[2] = { lin[i].N, lin[i].K };
        ol_tensor *x = leaf(2, xs, 10 + i, "x"), *w = leaf(2, ws, 20 + i, "w");
        char name[96];
        snprintf(name, sizeof name, "linear %s", lin[i].what);
        same_bits(name, f_linear, x, w, NULL);
    }
    /* dW over K = 2048 rows (four 512-row chunks), and the four transposes of batched products */
    {
        int64_t as[2] = { 2048, 64 }, bs[2] = { 2048, 256 };
        tr t = { 1, 0 };
        same_bits("matmul aᵀ·b over 2048 rows (K chunks)", f_matmul, leaf(2, as, 31, "a"), leaf(2, bs, 32, "b"), &t);
    }
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t as[3] = { 3, ta ? 23 : 45, ta ? 45 : 23 }, bs[3] = { 3, tb ? 19 : 23, tb ? 23 : 19 };
            tr t = { ta, tb };
            char name[64];
            snprintf(name, sizeof name, "batched matmul ta=%d tb=%d", ta, tb);
            same_bits(name, f_matmul, leaf(3, as, 40 + 2 * ta + tb, "a"), leaf(3, bs, 50 + 2 * ta + tb, "b"), &t);
        }
    /* attention: products of 64-row blocks with a scale, strided outputs */
    {
        int64_t qs[4] = { 2, 2, 64, 32 }, ks[4] = { 2, 2, 64, 32 };
        same_bits("attention (B 2, NH 2, T 64, HD 32)", f_attn, leaf(4, qs, 61, "q"), leaf(4, ks, 62, "kv"), NULL);
        int64_t q2[4] = { 1, 3, 150, 24 }, k2[4] = { 1, 3, 150, 24 };
        same_bits("attention (B 1, NH 3, T 150, HD 24): three query tiles", f_attn, leaf(4, q2, 63, "q"),
                  leaf(4, k2, 64, "kv"), NULL);
    }

    /* which kernel: on a machine where it serves the organism's shapes, it must be used for all */
    if (ol_gemm_engine_kernel(0, 1, 256, 64, 64)) {
        int all = 1;
        int shapes[][5] = { { 0, 1, 256, 64, 64 }, { 0, 1, 256, 256, 64 }, { 0, 1, 256, 64, 256 }, { 0, 0, 256, 64, 64 },
                            { 0, 0, 256, 256, 64 }, { 0, 0, 256, 64, 256 }, { 1, 0, 64, 64, 512 }, { 1, 0, 256, 64, 512 },
                            { 1, 0, 64, 256, 512 }, { 0, 1, 64, 64, 32 }, { 0, 0, 64, 32, 64 }, { 1, 0, 64, 32, 64 } };
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            all &= ol_gemm_engine_kernel(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4]);
        ok(all, "the engine kernel serves every product shape of the model organism");
    } else {
        diag("the engine kernel does not serve this machine's products (no AVX-512, or OpenBLAS kernels it does not "
             "know): every product above ran through OpenBLAS both times");
    }
    ol_set_gemm_fast(0);
    ok(!ol_gemm_engine_kernel(0, 1, 256, 64, 64), "ol_set_gemm_fast(0) sends every product to OpenBLAS");
    ol_set_gemm_fast(1);
    ol_ctx_free(ctx);
    return tap_done();
}
