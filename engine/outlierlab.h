/*
 * outlierlab.h — the engine's one public header.
 *
 * The C engine of outlierlab: fp32/int32 tensors in arenas, reverse-mode autograd on a
 * per-step tape, OpenBLAS matmuls, the attention variants of the papers, the outlier
 * statistics, and the file formats (safetensors, token files). The LuaJIT layer in
 * lua/outlierlab/ reads THIS file with ffi.cdef (lines starting with '#' are dropped),
 * so it stays free of macros: one source of truth for C and Lua.
 *
 * Worked example (C; the Lua version is in README.md):
 *
 *     ol_ctx *ctx = ol_ctx_new(0, 0);                      // default capacities
 *     int64_t ws[2] = {4, 3}, xs[2] = {2, 3};
 *     ol_tensor *w = ol_param(ctx, "w", 2, ws);            // lives in the flat param buffer
 *     ol_fill_normal(w, 0.0f, 0.02f, 1234);
 *     ol_tensor *x = ol_tensor_new(ctx, OL_F32, 2, xs, "x");   // lives in the step arena
 *     ol_tensor *y = ol_linear(x, w, NULL);                // y = x·wᵀ, shape (2,4)
 *     ol_tensor *loss = ol_mean(ol_sum(ol_unary(y, OL_RELU)));
 *     if (!loss || ol_backward(loss) != 0) fprintf(stderr, "%s\n", ol_error());
 *     // gradients are in ol_grads_data(ctx); ol_step_reset(ctx) frees the step arena.
 *
 * Conventions (as in NumPy/PyTorch): row-major, contiguous, dims in NumPy order, at most
 * 4 dims. Shape letters: B batch, T time, C channels, NH heads, HD head dim, V vocab.
 * Every function that can fail returns NULL (pointers) or a non-zero int, and leaves a
 * message naming the op and the shapes in ol_error(). Nothing aborts on user input.
 */
#ifndef OUTLIERLAB_H
#define OUTLIERLAB_H
#include <stdint.h>
#include <stddef.h>

/* ===================================================================== core */

typedef enum ol_dtype { OL_F32 = 0, OL_I32 = 1 } ol_dtype;

typedef struct ol_ctx ol_ctx;

typedef struct ol_tensor {
    float   *data;          /* element storage when dtype == OL_F32 */
    int32_t *idata;         /* element storage when dtype == OL_I32 (aliases data) */
    float   *grad;          /* gradient, same shape; NULL until backward needs it */
    ol_ctx  *ctx;
    int64_t  shape[4];
    int64_t  numel;
    int32_t  ndim;
    int32_t  dtype;         /* ol_dtype */
    int32_t  requires_grad; /* 1: backward computes a gradient for it */
    int32_t  param_index;   /* index in the parameter table, -1 for other tensors */
    uint64_t gen;           /* step generation; 0 = persistent (params, buffers) */
    char     name[48];
} ol_tensor;

/* Last error message of this thread ("" if none). */
const char *ol_error(void);
void        ol_clear_error(void);
const char *ol_version(void);

/* Threads for the engine's kernels and OpenBLAS; n <= 0 means OMP_NUM_THREADS or all cores. */
void ol_set_num_threads(int n);
int  ol_get_num_threads(void);

/* A context owns four flat buffers of param_capacity floats each (parameters, gradients,
 * AdamW m and v), a persistent arena and a step arena of step_capacity bytes. The buffers
 * are address-space reservations: pages are touched only when used. 0 picks defaults
 * (2^30 floats, 2^35 bytes). Returns NULL on failure. */
ol_ctx *ol_ctx_new(int64_t param_capacity, int64_t step_capacity);
void    ol_ctx_free(ol_ctx *ctx);

/* Grad mode: returns the previous value. With grad disabled no tape is recorded. */
int  ol_set_grad_enabled(ol_ctx *ctx, int enabled);
int  ol_grad_enabled(ol_ctx *ctx);

/* Frees every step tensor and the tape. Tensors of the old step become invalid: using one
 * in an op is an error naming it. */
void    ol_step_reset(ol_ctx *ctx);
int64_t ol_step_bytes_used(ol_ctx *ctx);
int64_t ol_step_bytes_peak(ol_ctx *ctx);
void    ol_step_reset_peak(ol_ctx *ctx);

/* Tensors. ol_tensor_new: step arena, contents undefined. ol_tensor_new_persistent: lives
 * as long as the context (data batches, statistics buffers). Both NULL on failure. */
ol_tensor *ol_tensor_new(ol_ctx *ctx, int32_t dtype, int32_t ndim, const int64_t *shape, const char *name);
ol_tensor *ol_tensor_new_persistent(ol_ctx *ctx, int32_t dtype, int32_t ndim, const int64_t *shape, const char *name);
void       ol_tensor_set_name(ol_tensor *t, const char *name);
/* Marks a (step or persistent) tensor as a leaf that receives a gradient (in the step arena). */
int        ol_tensor_set_requires_grad(ol_tensor *t, int32_t flag);
/* The gradient buffer of t (allocated zero-filled on first use; a persistent tensor's
 * gradient persists and accumulates across steps until ol_tensor_zero_grad). */
float     *ol_tensor_grad(ol_tensor *t);
int        ol_tensor_zero_grad(ol_tensor *t);

/* Parameters: data is a slice of the flat parameter buffer, grad the same slice of the
 * flat gradient buffer; both persist. group selects the AdamW parameter group. */
ol_tensor *ol_param(ol_ctx *ctx, const char *name, int32_t ndim, const int64_t *shape);
int32_t    ol_param_count(ol_ctx *ctx);
ol_tensor *ol_param_get(ol_ctx *ctx, int32_t index);
int        ol_param_set_group(ol_tensor *p, int32_t group);
int32_t    ol_param_group(ol_tensor *p);
int64_t    ol_param_offset(ol_tensor *p);      /* offset in the flat buffers, in floats */
int64_t    ol_params_numel(ol_ctx *ctx);       /* floats used in each flat buffer */
float     *ol_params_data(ol_ctx *ctx);
float     *ol_grads_data(ol_ctx *ctx);
float     *ol_adam_m_data(ol_ctx *ctx);
float     *ol_adam_v_data(ol_ctx *ctx);
void       ol_zero_grad(ol_ctx *ctx);

/* Fills (counter-based RNG: the same seed gives the same numbers for any thread count). */
int ol_fill(ol_tensor *t, float value);
int ol_fill_normal(ol_tensor *t, float mean, float std, uint64_t seed);
int ol_fill_uniform(ol_tensor *t, float lo, float hi, uint64_t seed);
int ol_copy_into(ol_tensor *dst, const ol_tensor *src);   /* same numel and dtype */
/* A deterministic uniform [0,1) number for (seed, index): the engine's one RNG. */
double ol_rand_uniform(uint64_t seed, uint64_t index);

/* Autograd: loss must have one element. Walks the tape in reverse, accumulating (+=)
 * into gradients. Returns 0, or non-zero with ol_error() set. */
int ol_backward(ol_tensor *loss);

/* ====================================================================== ops */
/* Every op returns a new step tensor (NULL on error) and records itself on the tape when
 * grad mode is on and an input requires grad. */

/* C = op(a)·op(b), op = transpose when ta/tb is 1 (the last two dims). Either b is 2-D and
 * a is (..., M, K) (leading dims flattened into M; ta must be 0 when a has > 2 dims), or a
 * and b have equal leading (batch) dims: a (..., M, K), b (..., K, N) -> (..., M, N). */
ol_tensor *ol_matmul(ol_tensor *a, ol_tensor *b, int32_t ta, int32_t tb);
/* y = x·wᵀ + bias: x (..., K), w (N, K), bias (N) or NULL -> (..., N). One sgemm. */
ol_tensor *ol_linear(ol_tensor *x, ol_tensor *w, ol_tensor *bias);

/* Elementwise a∘b. Shapes equal, or one operand's shape equals the other's trailing dims
 * (broadcast over the leading dims), or one operand has one element. */
ol_tensor *ol_add(ol_tensor *a, ol_tensor *b);
ol_tensor *ol_sub(ol_tensor *a, ol_tensor *b);
ol_tensor *ol_mul(ol_tensor *a, ol_tensor *b);
ol_tensor *ol_div(ol_tensor *a, ol_tensor *b);
/* y = s·a + c */
ol_tensor *ol_affine_scalar(ol_tensor *a, float s, float c);

typedef enum ol_unary_op {
    OL_EXP = 0, OL_LOG, OL_SQRT, OL_RELU, OL_GELU_TANH, OL_GELU_ERF,
    OL_SILU, OL_SIGMOID, OL_TANH, OL_NEG, OL_SQUARE, OL_ABS
} ol_unary_op;
ol_tensor *ol_unary(ol_tensor *a, int32_t op);

/* Sum / mean over the last dim: (..., C) -> (...); a 1-D input gives shape (1). */
ol_tensor *ol_sum(ol_tensor *a);
ol_tensor *ol_mean(ol_tensor *a);

/* Softmax over the last dim. causal: for a (..., Tq, Tk), entry (i, j) is masked (prob 0)
 * when j > i + (Tk - Tq). */
ol_tensor *ol_softmax(ol_tensor *a, int32_t causal);

/* LayerNorm over the last dim C: (x-mean)/sqrt(var+eps) [·w + b]; w, b (C) or NULL.
 * var is the biased variance, as in PyTorch. */
ol_tensor *ol_layernorm(ol_tensor *x, ol_tensor *w, ol_tensor *b, float eps);
/* RMSNorm over the last dim: x / sqrt(mean(x²)+eps) [·w]; w (C) or NULL. */
ol_tensor *ol_rmsnorm(ol_tensor *x, ol_tensor *w, float eps);

/* Embedding: ids int32 (...), table (V, C) -> (..., C). An id outside [0, V) is an error. */
ol_tensor *ol_embedding(ol_tensor *ids, ol_tensor *table);

/* Mean over rows of -log softmax(logits)[target], skipping rows whose target equals
 * ignore_index. logits (..., V), targets int32 with numel = rows. Returns shape (1).
 * With every row ignored the loss is 0. */
ol_tensor *ol_cross_entropy(ol_tensor *logits, ol_tensor *targets, int32_t ignore_index);

/* Shape ops (copies, except reshape which shares data). */
ol_tensor *ol_reshape(ol_tensor *a, int32_t ndim, const int64_t *shape);
ol_tensor *ol_transpose(ol_tensor *a, int32_t d0, int32_t d1);
ol_tensor *ol_narrow(ol_tensor *a, int32_t dim, int64_t start, int64_t length);
ol_tensor *ol_concat(int32_t n, ol_tensor **ts, int32_t dim);

/* Inverted dropout: zero with probability p, scale the rest by 1/(1-p); the mask is a
 * function of (seed, element index) only. */
ol_tensor *ol_dropout(ol_tensor *a, float p, uint64_t seed);

/* ================================================================ optimizer */

/* AdamW over every parameter (one pass over the flat buffers). Group g uses lr·lr_scale[g]
 * and weight decay wd[g] (decoupled: p -= lr·wd·p). step counts from 1 (bias correction). */
int   ol_adamw_step(ol_ctx *ctx, float lr, float beta1, float beta2, float eps,
                    int32_t ngroups, const float *lr_scale, const float *wd, int64_t step);
/* L2 norm of the flat gradient buffer (accumulated in double, fixed order). */
float ol_grad_norm(ol_ctx *ctx);
void  ol_grad_scale(ol_ctx *ctx, float s);
/* 1 if every gradient is finite. */
int   ol_grads_finite(ol_ctx *ctx);

/* ================================================================ attention */

/* ================================================================= analysis */

/* ======================================================================= io */

/* ============================================================= distributed */

/* ============================================================= compression */

#endif
