/*
 * test_expf.c — the engine's e^x (ol__expf), its clamp (ol__clampf) and the kept-or-zero mask
 * (ol__keepf), engine/internal.h.
 *
 * The clamp is a blend of bit patterns so that loops using e^x vectorise (see internal.h); it
 * must give the bits of the plain selects `x < lo ? lo : x > hi ? hi : x` for every float,
 * NaN, infinities, signed zeros and the neighbours of the bounds included. e^x must stay
 * within a few ulp of libm's expf inside the clamp, overflow to +inf above it, keep NaN, and
 * the SwiGLU op, whose loops now run vectorised, must give the bits of a scalar loop over the
 * same formula (no contraction into FMAs, no reassociation: the trained models' numbers).
 */
#include "tap.h"
#include "outlierlab.h"
#include "internal.h"
#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }
static float from_bits(uint32_t b) { float x; memcpy(&x, &b, 4); return x; }

/* the reference clamp: the selects the blend replaces, kept out of any vector loop */
__attribute__((noinline)) static float clamp_ref(float x, float lo, float hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

/* the reference SwiGLU element, scalar: silu(g)·u with σ = 1/(1 + e^{−g}) */
__attribute__((noinline, optimize("no-tree-vectorize"))) static float swiglu_ref(float g, float u) {
    float s = 1.0f / (1.0f + ol__expf(-g));
    return (g * s) * u;
}

/* the scalar references of the other e^x loops (engine/ops_elementwise.c), selects and all */
#define GELU_K 0.7978845608028654f
__attribute__((noinline, optimize("no-tree-vectorize"))) static float silu_ref(float x, int sig) {
    float s = 1.0f / (1.0f + ol__expf(-x));
    return sig ? s : x * s;
}
__attribute__((noinline, optimize("no-tree-vectorize"))) static float gelu_tanh_ref(float x) {
    float u2 = 2.0f * GELU_K * (x + 0.044715f * x * x * x);
    return x / (1.0f + ol__expf(-u2));
}
__attribute__((noinline, optimize("no-tree-vectorize"))) static float gelu_tanh_d_ref(float x) {
    float u2 = 2.0f * GELU_K * (x + 0.044715f * x * x * x);
    float s = 1.0f / (1.0f + ol__expf(-u2));
    float xc = x < -1e4f ? -1e4f : (x > 1e4f ? 1e4f : x);
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * xc * xc);
    return s + 2.0f * x * s * (1.0f - s) * du;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next32(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

int main(void) {
    /* the clamp, bit for bit, on special values and random bit patterns */
    const float lo = -87.3f, hi = 88.3f;
    float special[] = { 0.0f, -0.0f, 1.0f, -1.0f, lo, hi, nextafterf(lo, 0), nextafterf(lo, -1000),
                        nextafterf(hi, 0), nextafterf(hi, 1000), INFINITY, -INFINITY, NAN, -NAN,
                        1e-45f, -1e-45f, 3.4e38f, -3.4e38f };
    int bad = 0;
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        if (bits_of(ol__clampf(special[i], lo, hi)) != bits_of(clamp_ref(special[i], lo, hi))) {
            bad++;
            printf("# clamp of %g (0x%08x): 0x%08x, the selects 0x%08x\n", special[i], bits_of(special[i]),
                   bits_of(ol__clampf(special[i], lo, hi)), bits_of(clamp_ref(special[i], lo, hi)));
        }
    is_int(bad, 0, "clamp: the bits of the selects on zeros, bounds and their neighbours, infinities, NaN");
    bad = 0;
    for (int i = 0; i < 1000000; i++) {
        float x = from_bits(next32());
        if (bits_of(ol__clampf(x, lo, hi)) != bits_of(clamp_ref(x, lo, hi))) bad++;
    }
    is_int(bad, 0, "clamp: the bits of the selects on 10^6 random bit patterns");
    bad = 0;
    for (int i = 0; i < 100000; i++) {   /* other bounds, both signs */
        float a = from_bits(next32() & 0x7f7fffffu), b = from_bits(next32() & 0x7f7fffffu);
        float l = -(a < b ? a : b), h = a < b ? b : a, x = from_bits(next32());
        if (bits_of(ol__clampf(x, l, h)) != bits_of(clamp_ref(x, l, h))) bad++;
    }
    is_int(bad, 0, "clamp: the bits of the selects with 10^5 random bounds");

    /* the kept-or-zero mask: x's bits when kept (NaN and -0 included), +0 otherwise */
    bad = 0;
    for (int i = 0; i < 100000; i++) {
        float x = from_bits(next32());
        if (bits_of(ol__keepf(1, x)) != bits_of(x) || bits_of(ol__keepf(0, x)) != 0u || bits_of(ol__keepf(-3, x)) != bits_of(x)) bad++;
    }
    is_int(bad, 0, "keepf: x's bits when kept, +0 when not, on 10^5 random bit patterns");

    /* e^x: accuracy inside the clamp, the edges outside it */
    double worst = 0.0;
    for (int i = 0; i <= 200000; i++) {
        float x = -87.0f + 175.0f * (float)i / 200000.0f;
        double want = exp((double)x), got = ol__expf(x);
        double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel;
    }
    ok(worst < 4.0 * 5.96e-8, "e^x within 4 ulp of exp on [-87, 88]");
    if (worst >= 4.0 * 5.96e-8) printf("# worst relative error %.3g\n", worst);
    ok(isnan(ol__expf(NAN)), "e^NaN is NaN");
    ok(isinf(ol__expf(INFINITY)) && ol__expf(INFINITY) > 0, "e^+inf is +inf");
    ok(isinf(ol__expf(89.0f)), "e^89 overflows to +inf");
    float tiny = ol__expf(-INFINITY);
    ok(tiny > 0.0f && tiny < 1e-37f && bits_of(tiny) == bits_of(ol__expf(-87.3f)), "e^-inf is e^-87.3 (the clamp)");
    ok(ol__expf(0.0f) == 1.0f && ol__expf(-0.0f) == 1.0f, "e^0 = e^-0 = 1");

    /* SwiGLU's (vectorised) forward: the bits of the scalar formula, edges included */
    ol_ctx *ctx = ol_ctx_new(1 << 20, 1 << 26);
    int64_t n = 100003;   /* not a multiple of any vector width */
    int64_t shape[1] = { n };
    ol_tensor *g = ol_tensor_new_persistent(ctx, OL_F32, 1, shape, "g");
    ol_tensor *u = ol_tensor_new_persistent(ctx, OL_F32, 1, shape, "u");
    ol_fill_uniform(g, -30.0f, 30.0f, 1);
    ol_fill_uniform(u, -3.0f, 3.0f, 2);
    float *G = g->data;
    G[0] = 100.0f; G[1] = -100.0f; G[2] = 88.3f; G[3] = -88.3f; G[4] = 87.3f; G[5] = -87.3f;
    G[6] = 0.0f; G[7] = -0.0f; G[8] = 1e-30f; G[9] = -1e-30f;
    ol_tensor *h = ol_swiglu(g, u);
    ok(h != NULL, "swiglu runs");
    bad = 0;
    for (int64_t i = 0; h && i < n; i++)
        if (bits_of(((float *)h->data)[i]) != bits_of(swiglu_ref(G[i], ((float *)u->data)[i]))) {
            if (bad++ < 3) printf("# element %lld: g %g u %g: %a, scalar %a\n", (long long)i, G[i],
                                  ((float *)u->data)[i], ((float *)h->data)[i], swiglu_ref(G[i], ((float *)u->data)[i]));
        }
    is_int(bad, 0, "swiglu forward: the bits of the scalar formula on 100,003 elements");

    /* SiLU, sigmoid and GELU(tanh): forward, and the backward of Σ f(x)·r (dx = 0 + r·f'(x)) */
    G[10] = 2e4f; G[11] = -2e4f; G[12] = 1e4f; G[13] = -1e4f;
    const int ops[3] = { OL_SILU, OL_SIGMOID, OL_GELU_TANH };
    const char *names[3] = { "silu", "sigmoid", "gelu(tanh)" };
    for (int o = 0; o < 3; o++) {
        ol_step_reset(ctx);
        ol_tensor_set_requires_grad(g, 1);
        ol_tensor_zero_grad(g);
        ol_tensor *y = ol_unary(g, ops[o]);
        ol_tensor *loss = y ? ol_sum(ol_mul(y, u)) : NULL;
        ok(loss && ol_backward(loss) == 0, names[o]);
        int badf = 0, badb = 0;
        for (int64_t i = 0; y && i < n; i++) {
            float x = G[i], r = ((float *)u->data)[i];
            float want = ops[o] == OL_GELU_TANH ? gelu_tanh_ref(x) : silu_ref(x, ops[o] == OL_SIGMOID);
            if (bits_of(((float *)y->data)[i]) != bits_of(want)) badf++;
            if (ops[o] == OL_GELU_TANH && bits_of(g->grad[i]) != bits_of(0.0f + r * gelu_tanh_d_ref(x))) badb++;
        }
        char msg[128];
        snprintf(msg, sizeof msg, "%s forward: the bits of the scalar formula", names[o]);
        is_int(badf, 0, msg);
        if (ops[o] == OL_GELU_TANH) is_int(badb, 0, "gelu(tanh) backward: the bits of the scalar formula, |x| > 1e4 included");
        ol_tensor_set_requires_grad(g, 0);
    }
    ol_ctx_free(ctx);
    return tap_done();
}
