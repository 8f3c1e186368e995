/*
 * test_core.c — C-level checks of the engine core: the step arena (alignment, accounting,
 * reset, overflow), the flat parameter buffer (params are contiguous aligned slices, their
 * gradients and AdamW moments at the same offsets), shape-size overflow, error strings,
 * stale tensors, deterministic fills and the global gradient norm.
 */
#include "tap.h"
#include "outlierlab.h"
#include <stdlib.h>

static int aligned64(const void *p) { return ((uintptr_t)p & 63) == 0; }

int main(void) {
    ol_set_num_threads(1);
    ok(ol_error()[0] == 0, "no error before anything ran");

    /* ------------------------------------------------------------ step arena */
    ol_ctx *ctx = ol_ctx_new(1 << 12, 1 << 16);   /* 4096 floats per flat buffer, 64 KiB steps */
    ok(ctx != NULL, "ol_ctx_new with small capacities");
    int64_t s5[1] = { 5 }, s23[2] = { 2, 3 };
    is_int(ol_step_bytes_used(ctx), 0, "fresh context: step arena empty");
    ol_tensor *a = ol_tensor_new(ctx, OL_F32, 1, s5, "a");
    ol_tensor *b = ol_tensor_new(ctx, OL_F32, 2, s23, "b");
    ok(a && b, "two step tensors");
    ok(aligned64(a->data) && aligned64(b->data), "step tensor data is 64-byte aligned");
    is_int(ol_step_bytes_used(ctx), 64 + 64, "5 and 6 floats take one 64-byte block each");
    ok((char *)b->data >= (char *)a->data + 20, "step tensors do not overlap");
    is_int(a->numel, 5, "numel of (5)");
    is_int(b->numel, 6, "numel of (2,3)");
    is_int(a->param_index, -1, "a step tensor is not a parameter");
    int64_t sbig[1] = { 1 << 15 };    /* 128 KiB > 64 KiB arena */
    ol_clear_error();
    ok(ol_tensor_new(ctx, OL_F32, 1, sbig, "big") == NULL, "tensor larger than the step arena: NULL");
    like(ol_error(), "out of memory", "out-of-memory error message");
    like(ol_error(), "big", "out-of-memory message names the tensor");
    int64_t peak = ol_step_bytes_peak(ctx);
    ol_step_reset(ctx);
    is_int(ol_step_bytes_used(ctx), 0, "reset empties the step arena");
    is_int(ol_step_bytes_peak(ctx), peak, "reset keeps the peak");
    ol_step_reset_peak(ctx);
    is_int(ol_step_bytes_peak(ctx), 0, "reset_peak sets the peak to the current use");

    /* stale tensors: a (old step) is reported by name, even after new tensors were made */
    ol_tensor *c = ol_tensor_new(ctx, OL_F32, 1, s5, "c");
    ok(c != NULL && c != a, "a new step tensor does not reuse the old header");
    ol_clear_error();
    ok(ol_unary(a, OL_EXP) == NULL, "op on a tensor of a reset step fails");
    like(ol_error(), "'a'", "the stale tensor is named");
    like(ol_error(), "reset", "the message says the step was reset");
    ok(ol_unary(c, OL_EXP) != NULL, "op on a live tensor works");

    /* ------------------------------------------------------------ shape checks */
    int64_t over[3] = { (int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 31 };
    ol_clear_error();
    ok(ol_tensor_new(ctx, OL_F32, 3, over, "o") == NULL, "2^93 elements: size overflow rejected");
    like(ol_error(), "overflows", "overflow message");
    int64_t edge[2] = { INT64_MAX / 4, 2 };
    ok(ol_tensor_new(ctx, OL_F32, 2, edge, "e") == NULL, "numel·4 bytes beyond int64 rejected");
    int64_t negs[2] = { 2, -1 };
    ok(ol_tensor_new(ctx, OL_F32, 2, negs, "n") == NULL, "negative dim rejected");
    int64_t s5d[5] = { 1, 1, 1, 1, 1 };
    ol_clear_error();
    ok(ol_tensor_new(ctx, OL_F32, 5, s5d, "five") == NULL, "5 dims rejected");
    like(ol_error(), "ndim 5", "ndim message");
    ok(ol_tensor_new(ctx, 7, 1, s5, "dt") == NULL, "unknown dtype rejected");
    ok(ol_param(ctx, "huge", 3, over) == NULL, "parameter with an overflowing size rejected");

    /* ------------------------------------------------------------ error strings */
    int64_t s45[2] = { 4, 5 };
    ol_tensor *m1 = ol_tensor_new(ctx, OL_F32, 2, s23, "m1"), *m2 = ol_tensor_new(ctx, OL_F32, 2, s45, "m2");
    ol_clear_error();
    ok(ol_matmul(m1, m2, 0, 0) == NULL, "matmul (2,3)·(4,5) fails");
    like(ol_error(), "matmul", "error names the op");
    like(ol_error(), "(2,3)", "error has the first shape");
    like(ol_error(), "(4,5)", "error has the second shape");
    ol_clear_error();
    is_str(ol_error(), "", "ol_clear_error empties the message");
    ok(ol_add(NULL, m1) == NULL, "NULL input: NULL result");
    like(ol_error(), "NULL", "NULL input message");
    ok(ol_backward(m1) != 0, "backward of a (2,3) loss fails");
    like(ol_error(), "one element", "backward message");
    ok(ol_ctx_new((int64_t)1 << 50, 0) == NULL, "absurd parameter capacity: NULL, no crash");
    like(ol_error(), "too large", "capacity message");
    ok(ol_ctx_new(16, (int64_t)1 << 62) == NULL, "absurd step capacity: NULL, no crash");
    like(ol_error(), "cannot reserve", "reservation message");

    /* ------------------------------------------------------------ flat parameter buffer */
    int64_t ps1[2] = { 3, 5 }, ps2[1] = { 7 }, ps3[2] = { 2, 2 }, ps4[1] = { 5000 };
    ol_tensor *p1 = ol_param(ctx, "p1", 2, ps1), *p2 = ol_param(ctx, "p2", 1, ps2), *p3 = ol_param(ctx, "p3", 2, ps3);
    ok(p1 && p2 && p3, "three parameters");
    is_int(ol_param_count(ctx), 3, "param count");
    float *P = ol_params_data(ctx), *G = ol_grads_data(ctx), *Mm = ol_adam_m_data(ctx), *V = ol_adam_v_data(ctx);
    ol_tensor *ps[3] = { p1, p2, p3 };
    int slices_ok = 1, order_ok = 1;
    int64_t expect_off = 0;
    for (int i = 0; i < 3; i++) {
        int64_t off = ol_param_offset(ps[i]);
        slices_ok &= off == expect_off && ps[i]->data == P + off && ps[i]->grad == G + off;
        slices_ok &= aligned64(ps[i]->data) && off % 16 == 0;
        order_ok &= ol_param_get(ctx, i) == ps[i] && ps[i]->param_index == i;
        expect_off += (ps[i]->numel + 15) / 16 * 16;
    }
    ok(slices_ok, "params are consecutive 16-float-aligned slices of one buffer, grads at the same offsets");
    ok(order_ok, "param table order = creation order");
    is_int(ol_params_numel(ctx), expect_off, "params_numel = sum of the aligned slices (16 + 16 + 16)");
    ok(G == P + (1 << 12) && Mm == G + (1 << 12) && V == Mm + (1 << 12), "params, grads, m, v are four consecutive buffers of param_capacity floats");
    ok(p1->gen == 0 && p1->requires_grad == 1, "parameters are persistent and require grad");
    int zero = 1;
    for (int i = 0; i < 15; i++) zero &= p1->data[i] == 0 && p1->grad[i] == 0;
    ok(zero, "new parameter and gradient are zero");
    is_int(ol_param_group(p2), 0, "default group 0");
    ok(ol_param_set_group(p2, 1) == 0 && ol_param_group(p2) == 1, "set group 1");
    ok(ol_param_set_group(p2, 999) != 0, "group 999 rejected");
    ok(ol_param_set_group(a, 1) != 0, "set_group on a non-parameter rejected");
    ol_clear_error();
    ok(ol_param(ctx, "toolarge", 1, ps4) == NULL, "parameter beyond the flat buffer: NULL");
    like(ol_error(), "toolarge", "buffer-full message names the parameter");
    like(ol_error(), "flat parameter buffer full", "buffer-full message");
    is_int(ol_param_count(ctx), 3, "a failed parameter is not added");

    /* gradient through the flat buffer: y = sum(p1 * p1) -> grad 2·p1, at G + offset */
    ol_step_reset(ctx);
    for (int i = 0; i < 15; i++) p1->data[i] = (float)i - 7;
    int64_t n15[1] = { 15 };
    ol_tensor *loss = ol_sum(ol_reshape(ol_mul(p1, p1), 1, n15));
    ok(loss && ol_backward(loss) == 0, "backward of sum(p1²)");
    int gok = 1;
    for (int i = 0; i < 15; i++) gok &= G[ol_param_offset(p1) + i] == 2.0f * ((float)i - 7);
    ok(gok, "gradient 2·p1 lands in the flat gradient buffer at p1's offset");
    /* AdamW moments at the same offsets: one step from zero state, m = (1-β1)·g */
    float lrs[2] = { 1, 1 }, wd[2] = { 0, 0 };
    ok(ol_adamw_step(ctx, 0.1f, 0.9f, 0.95f, 1e-8f, 2, lrs, wd, 1) == 0, "adamw step");
    int mok = 1;
    for (int i = 0; i < 15; i++) mok &= fabsf(Mm[ol_param_offset(p1) + i] - 0.1f * 2.0f * ((float)i - 7)) < 1e-6f;
    ok(mok, "AdamW m sits at the parameter's offset: m = (1-β1)·g");
    /* first Adam step moves every parameter with a non-zero gradient by lr·sign(g) */
    is_near(p1->data[0], -7.0 + 0.1, 1e-5, "first AdamW step = lr·sign(g) (p = -7, g = -14)");
    ok(ol_adamw_step(ctx, 0.1f, 0.9f, 0.95f, 1e-8f, 1, lrs, wd, 2) != 0, "adamw: a parameter in group 1 with 1 group given is an error");
    like(ol_error(), "p2", "adamw group error names the parameter");

    /* grad norm (double accumulation): grads 3 and 4 -> 5 */
    ol_zero_grad(ctx);
    G[ol_param_offset(p1)] = 3; G[ol_param_offset(p3) + 3] = 4;
    is_near(ol_grad_norm(ctx), 5.0, 1e-6, "global gradient norm across two parameters");
    ol_grad_scale(ctx, 0.5f);
    is_near(G[ol_param_offset(p3) + 3], 2.0, 0, "grad_scale");
    ok(ol_grads_finite(ctx), "finite gradients");
    G[ol_param_offset(p2) + 6] = NAN;
    ok(!ol_grads_finite(ctx), "a NaN gradient is detected");
    ol_zero_grad(ctx);
    ok(ol_grads_finite(ctx) && G[ol_param_offset(p2) + 6] == 0, "zero_grad clears the flat gradient buffer");

    /* ------------------------------------------------------------ fills */
    int64_t s1k[1] = { 4096 };
    ol_tensor *f1 = ol_tensor_new_persistent(ctx, OL_F32, 1, s1k, "f1");
    ol_tensor *f2 = ol_tensor_new_persistent(ctx, OL_F32, 1, s1k, "f2");
    ol_fill_normal(f1, 1.0f, 2.0f, 42);
    ol_set_num_threads(2);
    ol_fill_normal(f2, 1.0f, 2.0f, 42);
    ol_set_num_threads(1);
    ok(memcmp(f1->data, f2->data, 4096 * 4) == 0, "fill_normal: same seed, 1 vs 2 threads: bit-identical");
    double mean = 0, var = 0;
    for (int i = 0; i < 4096; i++) mean += f1->data[i];
    mean /= 4096;
    for (int i = 0; i < 4096; i++) var += (f1->data[i] - mean) * (f1->data[i] - mean);
    var /= 4095;
    is_near(mean, 1.0, 0.1, "fill_normal mean 1 (n = 4096, 3 standard errors)");
    is_near(sqrt(var), 2.0, 0.07, "fill_normal std 2");
    ol_fill_normal(f2, 1.0f, 2.0f, 43);
    ok(memcmp(f1->data, f2->data, 4096 * 4) != 0, "fill_normal: another seed, other numbers");
    ol_fill_uniform(f1, -3.0f, 5.0f, 7);
    int inrange = 1, matches = 1;
    for (int i = 0; i < 4096; i++) {
        inrange &= f1->data[i] >= -3.0f && f1->data[i] < 5.0f;
        matches &= f1->data[i] == -3.0f + 8.0f * (float)ol_rand_uniform(7, (uint64_t)i);
    }
    ok(inrange, "fill_uniform stays in [lo, hi)");
    ok(matches, "fill_uniform element i = lo + (hi-lo)·ol_rand_uniform(seed, i)");
    is_near(ol_rand_uniform(7, 0), ol_rand_uniform(7, 0), 0, "ol_rand_uniform is a pure function");
    ok(ol_rand_uniform(7, 0) != ol_rand_uniform(8, 0), "ol_rand_uniform depends on the seed");
    ol_fill(f1, 2.5f);
    ok(f1->data[0] == 2.5f && f1->data[4095] == 2.5f, "fill constant");

    ol_ctx_free(ctx);
    return tap_done();
}
