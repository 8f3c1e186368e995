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
    int32_t  grad_pending;  /* engine-internal: 1 while ol_backward has allocated grad but nothing
                             * has written it yet (the gradient is 0; the first write stores) */
    int32_t  reserved_;
} ol_tensor;

/* Last error message of this thread ("" if none). */
const char *ol_error(void);
void        ol_clear_error(void);
const char *ol_version(void);

/* Threads for the engine's kernels and OpenBLAS; n <= 0 means OMP_NUM_THREADS or all cores. */
void ol_set_num_threads(int n);
int  ol_get_num_threads(void);
/* Flush-to-zero on every thread that computes (1) or IEEE gradual underflow (0, the default):
 * with 1 a float result below FLT_MIN in magnitude is stored as 0, which avoids the CPU's slow
 * path for subnormal numbers (core.c, "subnormals"; docs/reference/training.md). ol_flushes_subnormals:
 * the calling thread's mode. */
void ol_set_flush_subnormals(int on);
int  ol_flushes_subnormals(void);

/* The engine's own kernel for small products (engine/gemm.c), used for each shape whose
 * every element it calibrated bit for bit against OpenBLAS; 0 sends every product through
 * OpenBLAS (as does OUTLIERLAB_GEMM=blas). Returns the old setting. */
int ol_set_gemm_fast(int on);
/* 1 when the engine kernel serves the single-threaded product C (m,n) = op(A)·op(B) with
 * inner dim k (calibrating the shape if it is new), 0 when OpenBLAS does. */
int ol_gemm_engine_kernel(int ta, int tb, int m, int n, int k);

/* OpenBLAS: the kernels it runs (e.g. "SkylakeX") and its build; ol_blas_core_hint() names
 * better kernels for this CPU when OpenBLAS's own detection fell back to old ones (engine/blas.c),
 * else NULL: a program sets OPENBLAS_CORETYPE to it and re-executes itself before using BLAS. */
const char *ol_blas_core(void);
const char *ol_blas_config(void);
const char *ol_blas_core_hint(void);

/* Step profile (make bench): seconds spent, while enabled, in what = 0 the matmul/linear
 * products (forward and backward), 1 backward nodes (all), 2 backward nodes of the fused
 * attention kernel. */
void   ol_profile_enable(int on);
void   ol_profile_reset(void);
double ol_profile_seconds(int32_t what);

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
 * into gradients. Returns 0, or non-zero with ol_error() set. The gradients of step
 * tensors are written first instead of zero-filled and added to (the same bits; see
 * engine/internal.h); ol_set_write_first(0) zero-fills them all before the walk, the
 * reference the tests compare with (1, the default, restores it; returns the old setting). */
int ol_backward(ol_tensor *loss);
int ol_set_write_first(int on);

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

/* Rotary position embedding (RoPE, rotate-half layout as in HF LLaMA / lit-gpt):
 * x (..., T, HD) with HD even; row t sits at position t + pos_offset; θ_i = base^(−2i/HD);
 * y[i] = x[i]·cos(pθ_i) − x[i+HD/2]·sin(pθ_i), y[i+HD/2] = x[i+HD/2]·cos + x[i]·sin.
 * (engine/ops_model.c) */
ol_tensor *ol_rope(ol_tensor *x, float base, int64_t pos_offset);

/* Fused ops of the LLaMA block (engine/ops_model.c), each the same numbers, forward and
 * backward, as the chain of ops it replaces, with fewer passes and no intermediate tensors:
 * ol_heads: x (B,T,NH·HD) -> (B,NH,T,HD), = x.view(B,T,NH,HD).transpose(1,2) followed by
 *   ol_rope(·, rope_base, pos_offset) when rope_base > 0;
 * ol_heads_merge: y (B,NH,T,HD) -> (B,T,NH·HD), = y.transpose(1,2).view(B,T,NH·HD);
 * ol_swiglu: g, u of one shape -> silu(g)·u (SwiGLU's gate product). */
ol_tensor *ol_heads(ol_tensor *x, int64_t n_head, float rope_base, int64_t pos_offset);
ol_tensor *ol_heads_merge(ol_tensor *y);
ol_tensor *ol_swiglu(ol_tensor *g, ol_tensor *u);

/* ================================================================ optimizer */

/* AdamW over every parameter (one pass over the flat buffers). Group g uses lr·lr_scale[g]
 * and weight decay wd[g] (decoupled: p -= lr·wd·p). step counts from 1 (bias correction). */
int   ol_adamw_step(ol_ctx *ctx, float lr, float beta1, float beta2, float eps,
                    int32_t ngroups, const float *lr_scale, const float *wd, int64_t step);
/* The same with every gradient multiplied by gscale first (the clipping factor, so clipping
 * costs no pass of its own; the gradient buffer is left as it is). */
int   ol_adamw_step_scaled(ol_ctx *ctx, float gscale, float lr, float beta1, float beta2, float eps,
                           int32_t ngroups, const float *lr_scale, const float *wd, int64_t step);
/* L2 norm of the flat gradient buffer (accumulated in double, fixed order). */
float ol_grad_norm(ol_ctx *ctx);
void  ol_grad_scale(ol_ctx *ctx, float s);
/* 1 if every gradient is finite. */
int   ol_grads_finite(ol_ctx *ctx);

/* Muon, OrthoAdam (engine/optim_extra.c; docs/reference/training.md). State in the AdamW m (and v) buffers.
 * Newton–Schulz: out ≈ the orthogonal polar factor of g (rows, cols): X0 = g/(‖g‖_F + 1e-7)
 * (transposed when rows > cols), then X ← a·X + (b·XXᵀ + c·(XXᵀ)²)·X, steps times; coef (a,b,c) or
 * NULL for Muon's quintic (3.4445, −4.7750, 2.0315); (1.5, −0.5, 0) is the classic cubic. */
int ol_newton_schulz(const float *g, int64_t rows, int64_t cols, int32_t steps, const float *coef, float *out);
/* Muon on parameters idx[0..n) (each as (numel/last, last)): m = μm + (1−μ)g; u = nesterov ?
 * (1−μ)g + μm : m; p -= lr·(k·NS_steps(u) + wd·p), k = √max(1, rows/cols) (scale_mode 0, Jordan)
 * or 0.2·√max(rows, cols) (scale_mode 1, Moonlight: AdamW-like update RMS). */
int ol_muon_step(ol_ctx *ctx, int32_t n, const int32_t *idx, float lr, float momentum, int32_t nesterov,
                 int32_t steps, float wd, int32_t scale_mode);
/* AdamW (ol_adamw_step's formula) on parameters idx[0..n) only. */
int ol_adamw_step_some(ol_ctx *ctx, int32_t n, const int32_t *idx, float lr, float beta1, float beta2, float eps,
                       int32_t ngroups, const float *lr_scale, const float *wd, int64_t step);
/* OrthoAdam: AdamW with the gradient rotated G̃ = Qa·G·Qbᵀ (G = the parameter as (numel/last,
 * last); qa[i], qb[i] orthogonal or NULL = identity), moments of G̃, update rotated back
 * U = Qaᵀ·Ũ·Qb. qa, qb may be NULL arrays. */
int ol_orthoadam_step(ol_ctx *ctx, int32_t n, const int32_t *idx, ol_tensor **qa, ol_tensor **qb, float lr,
                      float beta1, float beta2, float eps, int32_t ngroups, const float *lr_scale, const float *wd,
                      int64_t step);
/* q (n, n) = a random orthogonal matrix (Gram–Schmidt of N(0,1) entries drawn with seed). */
int ol_random_orthogonal(ol_tensor *q, uint64_t seed);

/* ================================================================ attention */
/* Fused attention variants (engine/attention.c; formulas there and in docs/reference/attention.md).
 * q (B,NH,Tq,HD), k, v (B,NH,Tk,HD) -> (B,NH,Tq,HD), s = q·kᵀ/√HD. Causal hides key j > i + Tk − Tq;
 * pad_mask int32 (B,Tk) (1 = real key) or NULL. kp, vp (NH,HD) are the variant's k′, v′:
 * kp for ca_bias/attn_bias, vp for fixed_bias/ca_bias/attn_bias, otherwise NULL. Only row
 * statistics are kept for backward (the T×T block is recomputed). */
typedef enum ol_attn_kind {
    OL_ATTN_SOFTMAX = 0, OL_ATTN_CLIPPED = 1, OL_ATTN_SOFTMAX1 = 2, OL_ATTN_SIGMOID = 3,
    OL_ATTN_FIXED_BIAS = 4, OL_ATTN_CA_BIAS = 5, OL_ATTN_ATTN_BIAS = 6,
    OL_ATTN_SINK_LOGIT = 7,   /* gpt-oss: softmax over [s, s_h], sink column dropped (sink_logit (NH)) */
    OL_ATTN_SOFTPICK = 8      /* Zuhri et al.: ReLU(e^s − 1)/(Σ|e^s − 1| + eps) (softpick_eps) */
} ol_attn_kind;
typedef struct ol_attn_cfg {
    int32_t kind;          /* ol_attn_kind */
    int32_t causal;        /* 1: decoder mask */
    float   gamma, zeta;   /* clipped_softmax: clip((zeta-gamma)·p + gamma, 0, 1) */
    float   sigmoid_bias;  /* sigmoid: σ(s + b [+ b_h]) */
    /* Attention-probability dropout (training only; 0 = off): the weight A[b,h,i,j] is kept
     * when u(seed, ((b·NH+h)·Tq+i)·Tk+j) >= p and then scaled by 1/(1−p), the mask ol_dropout
     * draws for a (B,NH,Tq,Tk) tensor; the sink weight P′ of ca_bias/attn_bias uses the same
     * rule with seed ^ 0x9E3779B97F4A7C15 and index (b·NH+h)·Tq+i. */
    float    dropout;
    uint64_t dropout_seed;
    ol_tensor *sigmoid_bias_h;  /* sigmoid: learnable per-head offset b_h (NH), or NULL */
    ol_tensor *sink_logit;      /* sink_logit: the learned per-head sink logit s_h (NH) */
    float      softpick_eps;    /* softpick: ε of the denominator (>= 0) */
} ol_attn_cfg;
ol_tensor *ol_attention(ol_tensor *q, ol_tensor *k, ol_tensor *v, ol_tensor *kp, ol_tensor *vp,
                        ol_tensor *pad_mask, const ol_attn_cfg *cfg);
/* The weights the forward multiplies V by, materialised (B,NH,Tq,Tk), no tape (for probes),
 * before dropout (cfg->dropout is ignored). For ca_bias/attn_bias/sink_logit *sink (if sink is
 * not NULL) receives the sink weight P′ (B,NH,Tq) (sink_logit: the dropped column's weight). */
ol_tensor *ol_attention_probs(ol_tensor *q, ol_tensor *k, ol_tensor *kp, ol_tensor *pad_mask,
                              const ol_attn_cfg *cfg, ol_tensor **sink);
/* y (B,NH,T,HD), g (B,T,NH) -> out[b,h,t,:] = g[b,t,h]·y[b,h,t,:] (gates, context-aware scale). */
ol_tensor *ol_head_scale(ol_tensor *y, ol_tensor *g);

/* ================================================================= analysis */

/* Outlier statistics (docs/reference/metrics.md). A streaming accumulator ol_stats
 * reads activation tensors x (B, T, C) batch after batch without keeping them, and holds its
 * whole state in ONE flat double array, in three sections:
 *   [0, nsum)            counts and sums     — merge across accumulators/ranks by +
 *   [nsum, nsum+nmax)    running maxima      — merge by elementwise max
 *   [nsum+nmax, size)    global top-k        — merge with ol_stats_merge (union, keep k)
 * ol_stats_merge(dst, src) does all three exactly (sums to rounding). Offsets of every named
 * field are in ol_stats_layout. Sums are in double, reduced in sequence order: the result does
 * not depend on the thread count, and streaming batch by batch equals one big batch. */
typedef enum ol_outlier_kind {
    OL_OUTLIER_NONE = 0,      /* no outlier counting */
    OL_OUTLIER_SIGMA = 1,     /* |x − μ| > k·σ (QT: k = 6), σ unbiased */
    OL_OUTLIER_TAU_MEAN = 2   /* |x| > k·mean|x| (SO §3: k = τ = 1000) */
} ol_outlier_kind;
typedef enum ol_outlier_scope {
    OL_SCOPE_BATCH = 0,       /* μ, σ / mean|x| over the whole tensor passed to one update (B·T·C) */
    OL_SCOPE_SEQUENCE = 1,    /* over each sequence's T·C values (SO: one sample at a time) */
    OL_SCOPE_FIXED = 2        /* given values (dataset level: two passes, the first one's moments) */
} ol_outlier_scope;
typedef struct ol_outlier_rule {
    int32_t kind;             /* ol_outlier_kind */
    int32_t scope;            /* ol_outlier_scope */
    double  k;                /* 6 for 6σ, τ for τ·mean */
    double  mu, sigma;        /* SIGMA with FIXED scope */
    double  mean_abs;         /* TAU_MEAN with FIXED scope */
} ol_outlier_rule;
typedef struct ol_stats_spec {
    int64_t T;                /* max positions (x's T may be smaller) */
    int64_t C;                /* channels: x's last dim must equal it */
    int64_t V;                /* vocabulary size for by-token counts; 0 = none */
    int32_t topk;             /* k of the per-sequence and global top-k (SO: 3); 1..64 */
    int32_t nbins;            /* histogram bins (+ underflow and overflow); 0 = none */
    int32_t hist_log;         /* 0: bins of x over [lo, hi); 1: log10-spaced bins of |x| over [lo, hi) */
    double  hist_lo, hist_hi;
    ol_outlier_rule rule;
} ol_stats_spec;
typedef struct ol_stats_layout {
    int64_t size, nsum, nmax, ntopk;
    /* sums: scalars */
    int64_t n, nseq, ntok, nnonfinite, s1, s2, s3, s4, sabs;
    int64_t seq_kurt, nseq_kurt, seq_maxabs, seq_median, seq_topk /* topk values */;
    /* the official codes' conventions (docs/reference/metrics.md): Σ over sequences of QT's
     * μ₄/(s⁴ + 1e-6) and their count; Σ of the lower middle |x| (torch.median) */
    int64_t seq_kurt_qt, nseq_kurt_qt, seq_median_lower;
    int64_t nout, nout_tok, nseq_out;
    /* sums: arrays */
    int64_t out_pos /* T */, out_tok_pos /* T */, tok_pos /* T */;
    int64_t out_ch /* C */, sabs_ch /* C */;
    int64_t out_id /* V */, out_tok_id /* V */, tok_id /* V */;
    int64_t hist /* nbins + 2: [0] underflow, [nbins+1] overflow */;
    /* maxima */
    int64_t maxabs, maxv, negminv, maxabs_ch /* C */, maxabs_pos /* T */;
    /* top-k: topk records of 6 doubles (|x|, x, seq, pos, channel, token id or −1), |x| = −1 when empty */
    int64_t topk;
} ol_stats_layout;
typedef struct ol_stats ol_stats;

ol_stats *ol_stats_new(const ol_stats_spec *spec);
void      ol_stats_free(ol_stats *s);
int       ol_stats_reset(ol_stats *s);
const ol_stats_spec   *ol_stats_get_spec(const ol_stats *s);
const ol_stats_layout *ol_stats_get_layout(const ol_stats *s);
double   *ol_stats_data(ol_stats *s);
/* Sequence index given to the next sequence in top-k records (default 0; set it to a global
 * offset, e.g. per MPI rank, so that merged records name distinct sequences). */
int       ol_stats_set_seq_offset(ol_stats *s, int64_t offset);
/* Adds x (B, T, C) or (T, C). ids, mask: int32 with B·T elements or NULL; mask 0 = padding
 * (skipped everywhere). ids index the by-token counts (must be in [0, V) when V > 0). */
int       ol_stats_update(ol_stats *s, const ol_tensor *x, const ol_tensor *ids, const ol_tensor *mask);
/* dst += src: sums added, maxima maxed, top-k merged (same spec required). */
int       ol_stats_merge(ol_stats *dst, const ol_stats *src);

/* Per-token outlier flags of x (B, T, C) under rule: flags[b·T+t] = 1 if some channel is an
 * outlier (SO's per-token rule), else 0 (and 0 for masked tokens). tok_maxabs (B·T) or NULL
 * receives max_c |x|. Returns the number of flagged tokens, or −1 on error. */
int64_t   ol_outlier_token_flags(const ol_tensor *x, const ol_outlier_rule *rule, const ol_tensor *mask,
                                 int32_t *flags, double *tok_maxabs);
/* Weight W (O, I) (SO §3, Fig. 5): col_ratio[j] = max_i|w_ij| / mean_i|w_ij| (I values),
 * row_ratio[i] = max_j / mean_j (O values); col_out[j] / row_out[i] = number of weight outliers
 * |w_ij| > tau·mean_j|w_ij| (row-wise mean) in column j / row i. Any output may be NULL. */
int       ol_weight_stats(const ol_tensor *w, double tau, double *col_ratio, double *row_ratio,
                          double *col_out, double *row_out);
/* Cumulative attention (SO §3): A (B, NH, Tq, Tk) -> out[(b·NH+h)·Tk + j] = Σ_i A[b,h,i,j],
 * over the query rows i with qmask[b·Tq+i] != 0 (qmask int32 (B, Tq) or NULL = all). */
int       ol_attn_cumulative(const ol_tensor *a, const ol_tensor *qmask, double *out);
/* L2 norm of every row of the last dim: x (..., D) -> out (numel/D) (QT Fig. 3e: ‖v_j‖). */
int       ol_row_norms(const ol_tensor *x, double *out);
/* Eigenvalues of a symmetric n×n double matrix (cyclic Jacobi; engine/analysis_extra.c): the
 * matrix entropy of token representations (docs/reference/metrics.md). */
int       ol_sym_eigvals(const double *a, int64_t n, double *ev);

/* ======================================================================= io */

/* -- safetensors (engine/io_safetensors.c). File = u64 little-endian header length N, N
 * bytes of JSON {name: {dtype, shape, data_offsets:[begin,end]}, "__metadata__": {str: str}}
 * (padded with spaces to a multiple of 8), then the raw little-endian data area, which the
 * tensors cover exactly (no gaps, no overlap). Writer: add tensors (their data pointers must
 * stay valid until save) and metadata, then save writes "<path>.tmp.<pid>", fsyncs and
 * renames it to path (atomic). Reader: open maps the file and validates every entry; all
 * errors name the file and what is wrong. */
typedef enum ol_st_dtype {
    OL_ST_F32 = 0, OL_ST_F16, OL_ST_BF16, OL_ST_F64, OL_ST_I32, OL_ST_I64, OL_ST_I16,
    OL_ST_I8, OL_ST_U8, OL_ST_U16, OL_ST_U32, OL_ST_U64, OL_ST_BOOL, OL_ST_F8_E4M3, OL_ST_F8_E5M2
} ol_st_dtype;
typedef struct ol_st_writer ol_st_writer;
typedef struct ol_st_file ol_st_file;
ol_st_writer *ol_st_writer_new(void);
void          ol_st_writer_free(ol_st_writer *w);
/* shape has ndim (0..8) dims; data holds prod(shape) elements of dtype (F32, I32, ...). */
int ol_st_writer_add(ol_st_writer *w, const char *name, int32_t dtype, int32_t ndim,
                     const int64_t *shape, const void *data);
int ol_st_writer_set_metadata(ol_st_writer *w, const char *key, const char *value);
int ol_st_writer_save(ol_st_writer *w, const char *path);

ol_st_file *ol_st_open(const char *path);
void        ol_st_close(ol_st_file *f);
int32_t     ol_st_count(const ol_st_file *f);
const char *ol_st_name(const ol_st_file *f, int32_t i);          /* NULL if out of range */
int32_t     ol_st_find(const ol_st_file *f, const char *name);   /* index, or -1 (no error set) */
/* dtype, ndim and up to 8 dims of entry i; returns 0 or -1 */
int         ol_st_info(const ol_st_file *f, int32_t i, int32_t *dtype, int32_t *ndim, int64_t *shape);
const char *ol_st_dtype_name(int32_t dtype);
/* value of a metadata key, NULL if absent (no error set) */
const char *ol_st_metadata(const ol_st_file *f, const char *key);
int32_t     ol_st_metadata_count(const ol_st_file *f);
const char *ol_st_metadata_key(const ol_st_file *f, int32_t i);
/* Copy entry `name` into dst converting to f32 (from F32, F16, BF16, F64) or to i32 (from
 * I32, I64 in range, I16, U16, U8, I8); numel must equal the entry's element count. */
int ol_st_read_f32(const ol_st_file *f, const char *name, float *dst, int64_t numel);
int ol_st_read_i32(const ol_st_file *f, const char *name, int32_t *dst, int64_t numel);
/* Copy entry `name` into tensor t (f32 or i32), checking the shape against t's. */
int ol_st_read_into(const ol_st_file *f, const char *name, ol_tensor *t);

/* -- token files (engine/io_tokens.c), memory-mapped read-only. Formats: OL_TOK_RAW16 (nanoGPT
 * train.bin: bare uint16 tokens), OL_TOK_LLMC (llm.c: 256 int32 header {20240520, version,
 * count, 0...}, then count tokens, uint16 for version 1, uint32 for version 2); OL_TOK_AUTO
 * picks LLMC when the file starts with the magic. Size and header are checked on open. */
typedef enum ol_tok_format { OL_TOK_AUTO = 0, OL_TOK_RAW16 = 1, OL_TOK_LLMC = 2 } ol_tok_format;
typedef struct ol_token_file ol_token_file;
ol_token_file *ol_tokens_open(const char *path, int32_t format);
void           ol_tokens_close(ol_token_file *f);
int64_t        ol_tokens_count(const ol_token_file *f);
int32_t        ol_tokens_format(const ol_token_file *f);
int32_t        ol_tokens_width(const ol_token_file *f);   /* bytes per token: 2 or 4 */
/* largest token id in the file (one pass; cached) */
int64_t        ol_tokens_max(ol_token_file *f);
/* dst[i] = token[start + i], i < n; -1 if [start, start+n) leaves the file */
int            ol_tokens_copy_i32(const ol_token_file *f, int64_t start, int64_t n, int32_t *dst);
/* Write n tokens (each in [0, 65535]) as RAW16 or LLMC version 1, atomically. */
int            ol_tokens_write(const char *path, int32_t format, const int32_t *tokens, int64_t n);

/* -- synthetic images (engine/io_images.c): one centred object of class cls on a textured
 * background, deterministic in (seed, index). out is (3, H, W) f32, normalised as (x-0.5)/0.25
 * from [0,1] colours; objmask (H, W), if not NULL, gets 1 for object pixels, 0 otherwise.
 * Classes: 0 disc, 1 square, 2 plus, 3 triangle, 4 ring, 5 diamond, 6 x-cross, 7 frame. */
int32_t ol_image_num_classes(void);
const char *ol_image_class_name(int32_t cls);
int ol_image_synth(float *out, uint8_t *objmask, int32_t H, int32_t W, int32_t cls,
                   uint64_t seed, uint64_t index);
/* style 0 = textured background (ol_image_synth), 1 = flat background and a small object anywhere */
int ol_image_synth_style(float *out, uint8_t *objmask, int32_t H, int32_t W, int32_t cls,
                         uint64_t seed, uint64_t index, int32_t style);

/* -- NetCDF-4 result files (engine/io_netcdf.c). Build in define mode (dims, vars, attributes;
 * varid -1 = global attribute), ol_nc_enddef, put whole variables, then ol_nc_close, which
 * closes the temporary "<path>.tmp.<pid>" and renames it to path (atomic). Variables with
 * dims are deflated (level 4, shuffle). Ids >= 0 on success, -1 with ol_error() set. */
typedef struct ol_nc ol_nc;
typedef enum ol_nc_type { OL_NC_FLOAT = 0, OL_NC_DOUBLE = 1, OL_NC_INT = 2 } ol_nc_type;
ol_nc *ol_nc_create(const char *path);
int    ol_nc_def_dim(ol_nc *f, const char *name, int64_t len);
int    ol_nc_def_var(ol_nc *f, const char *name, int32_t type, int32_t ndims, const int32_t *dimids);
int    ol_nc_put_att_text(ol_nc *f, int32_t varid, const char *name, const char *value);
int    ol_nc_put_att_double(ol_nc *f, int32_t varid, const char *name, double value);
int    ol_nc_put_att_int(ol_nc *f, int32_t varid, const char *name, int32_t value);
/* an attribute of n ints (CF flag_values of a categorical coordinate) */
int    ol_nc_put_att_int_array(ol_nc *f, int32_t varid, const char *name, int64_t n, const int32_t *values);
int    ol_nc_enddef(ol_nc *f);
int    ol_nc_put_float(ol_nc *f, int32_t varid, const float *data);
int    ol_nc_put_double(ol_nc *f, int32_t varid, const double *data);
int    ol_nc_put_int(ol_nc *f, int32_t varid, const int32_t *data);
int    ol_nc_close(ol_nc *f);
void   ol_nc_abort(ol_nc *f);

/* ============================================================= distributed */
/* Data parallelism over MPI (engine/dist.c). Calls refer to the current communicator: the
 * world, or the group this rank joined with ol_dist_split (sweeps). Without MPI_Init every
 * call behaves as one rank. Reduction ops: 0 sum, 1 max, 2 min. */
int      ol_dist_initialized(void);
int      ol_dist_rank(void);
int      ol_dist_size(void);
int      ol_dist_world_rank(void);
int      ol_dist_world_size(void);
int      ol_dist_split(int32_t color);      /* join the group of ranks with the same color */
int      ol_dist_unsplit(void);             /* back to the world communicator */
int      ol_dist_allreduce_grads(ol_ctx *ctx, int32_t average);   /* one MPI_Allreduce */
/* Rank-invariant gradient sums (train.run's cfg.shards): the global batch is cut into S fixed
 * shards (S a power of two); each shard's gradient is computed from a zeroed buffer and the S
 * gradients are added as a fixed binary tree ((g0+g1)+(g2+g3))..., whatever the number of
 * ranks. ol_grad_shard_push takes the gradient buffer as the next shard's leaf and zeroes it;
 * ol_grad_shard_finish leaves this rank's subtree sum in the gradient buffer;
 * ol_dist_allreduce_grads_tree adds the ranks' subtrees as the top of the same tree
 * (recursive doubling: the rank count must be a power of two) and scales by `scale`. */
int      ol_grad_shard_push(ol_ctx *ctx);
int      ol_grad_shard_finish(ol_ctx *ctx);
int      ol_dist_allreduce_grads_tree(ol_ctx *ctx, float scale);
int      ol_dist_allreduce_f64(double *buf, int64_t n, int32_t op);
int      ol_dist_allreduce_f32(float *buf, int64_t n, int32_t op);
int      ol_dist_allreduce_i64(int64_t *buf, int64_t n, int32_t op);
int      ol_dist_allgather_f64(const double *in, int64_t n, double *out);  /* out: size·n */
int      ol_dist_allgather_i64(const int64_t *in, int64_t n, int64_t *out);
int      ol_dist_allgatherv_bytes(const void *in, int64_t n, const int64_t *counts, void *out);
int      ol_dist_bcast_f32(float *buf, int64_t n, int32_t root);
int      ol_dist_bcast_params(ol_ctx *ctx, int32_t root);  /* params and AdamW state */
uint64_t ol_params_checksum(ol_ctx *ctx);   /* FNV-1a over the parameter bytes */
int      ol_dist_check_params(ol_ctx *ctx); /* error if any rank's checksum differs */
void     ol_dist_barrier(void);
int      ol_dist_quiet_barrier(int32_t poll_ms);   /* a barrier that sleeps poll_ms between tests */
double   ol_dist_wtime(void);
void     ol_dist_abort(int32_t code);
/* Checkpoint before a batch system's time limit: watch a signal (e.g. SIGUSR1 = 10); the
 * training loop polls between steps. ol_dist_signal_pending agrees across ranks (max). */
int      ol_signal_watch(int32_t signum);
int32_t  ol_signal_pending(void);
void     ol_signal_clear(void);         /* after the signal has been handled */
int32_t  ol_dist_signal_pending(void);

/* ============================================================= compression */
/* Post-training compression (engine/compress.c). Uniform quantiser with scale s, zero point z
 * and integer range [qmin, qmax]: q(x) = s·(clamp(round(x/s) + z, qmin, qmax) − z). */
ol_tensor *ol_fake_quant(ol_tensor *x, float scale, float zero_point, float qmin, float qmax);
int        ol_fake_quant_(ol_tensor *x, float scale, float zero_point, float qmin, float qmax);
int        ol_minmax(ol_tensor *x, float *out);                       /* out[2] = {min, max} */
int        ol_percentile_range(ol_tensor *x, double p, float *out);   /* {(100−p)th, p-th} */
float      ol_mse_scale_symmetric(ol_tensor *x, int32_t bits, int32_t n_grid);  /* < 0: error */
int        ol_absmax_quant_(ol_tensor *w, int32_t bits, int32_t per_channel);
float      ol_magnitude_kth(int32_t n, ol_tensor **ts, int64_t k);    /* < 0: error */
int64_t    ol_magnitude_prune_(int32_t n, ol_tensor **ts, float sparsity, int32_t global);
/* 4-bit era (engine/quant.c; docs/reference/compression.md). Symmetric RTN of activations, no gradient:
 * s = clip·max|x|/(2^(b−1)−1) per token (row of the last dim, per_token = 1) or per tensor. */
ol_tensor *ol_quant_tokens(ol_tensor *x, int32_t bits, int32_t per_token, float clip);
/* Normalised Walsh–Hadamard rotation along the last dim in blocks of `block` (a power of two
 * dividing it; 0 = the largest such): y = x·H/√n per block; differentiable (H is its own inverse). */
ol_tensor *ol_hadamard(ol_tensor *x, int64_t block);
/* In place on a 2-D t: dim 1 rotates every row (t ← t·H), dim 0 every column (t ← H·t). */
int        ol_hadamard_(ol_tensor *t, int32_t dim, int64_t block);
/* w[..., j] *= s[j] (inverse: /= s[j]) in place, s of the last dim's length, positive. */
int        ol_scale_cols_(ol_tensor *w, const float *s, int32_t inverse);
/* out[j] = max(out[j], max over rows |x[..., j]|) (calibration of per-channel ranges). */
int        ol_absmax_cols(const ol_tensor *x, float *out);
/* SmoothQuant: s_j = max(xmax_j, 1e-5)^α / max(max_i |w_ij|, 1e-5)^(1−α), w (out, in). */
int        ol_smooth_scales(const float *xmax, const ol_tensor *w, float alpha, float *s);

/* ======================================================== pretrained models */
/* Hugging Face model directories (engine/io_hf.c; names and configs in lua/outlierlab/pretrained/hf.lua).
 * dtype is an ol_st_dtype; src points at raw little-endian tensor bytes (ol_st_data).
 * F16/BF16 -> F32 is exact; F32 -> F16/BF16 rounds to nearest even. Threads split the work
 * into disjoint ranges, so results do not depend on the thread count. */
/* Raw bytes of safetensors entry i inside the file's map (engine/io_safetensors.c). */
const void *ol_st_data(const ol_st_file *f, int32_t i, int64_t *nbytes);
/* dst[0..n) = src[0..n) as f32 (src F32, F16, BF16 or F64). */
int ol_hf_to_f32(const void *src, int32_t dtype, int64_t n, float *dst);
/* src is a (rows, cols) matrix; dst (ncols, rows) = transpose of its columns [col0, col0+ncols)
 * (GPT-2's Conv1D weights are stored (in, out); c_attn fuses q, k, v along out). */
int ol_hf_to_f32_t(const void *src, int32_t dtype, int64_t rows, int64_t cols, int64_t col0, int64_t ncols,
                   float *dst);
/* dst (n, ncols) = rows ids[0..n) of the (nrows, ncols) table src; an id outside [0, nrows) is an error. */
int ol_hf_gather_rows(const void *src, int32_t dtype, int64_t nrows, int64_t ncols, const int32_t *ids,
                      int64_t n, float *dst);
/* dst = src converted to F32, F16 or BF16 (n elements). */
int ol_hf_from_f32(const float *src, int64_t n, int32_t dtype, void *dst);
/* Give the whole pages of a read-only file mapping inside [ptr, ptr+nbytes) back to the kernel
 * (madvise DONTNEED): they leave the resident set and are read again from the file if touched. */
int ol_hf_release(const void *ptr, int64_t nbytes);
/* Index of the first +-Inf or NaN among the n values at src (F32, F16, BF16, F64), or -1. */
int64_t ol_hf_first_nonfinite(const void *src, int32_t dtype, int64_t n);
/* *out = XXH64 (seed 0) of the whole content of the file at path (content-based cache keys). */
int ol_hf_hash_file(const char *path, uint64_t *out);

/* llama2.c checkpoints and tokenizer.bin (engine/io_llama2c.c; the conversion in
 * lua/outlierlab/pretrained/llama2c.lua). Open checks every header field and the file's exact
 * size (overflow-checked); errors name the file and the field. */
typedef struct ol_l2c_file ol_l2c_file;
typedef struct ol_l2c_tok ol_l2c_tok;
enum { OL_L2C_TOK = 0, OL_L2C_RMS_ATT, OL_L2C_WQ, OL_L2C_WK, OL_L2C_WV, OL_L2C_WO, OL_L2C_RMS_FFN, OL_L2C_W1, OL_L2C_W2,
       OL_L2C_W3, OL_L2C_RMS_FINAL, OL_L2C_WCLS, OL_L2C_NTENSORS };
enum { OL_L2C_NHEADER = 10 };
ol_l2c_file *ol_l2c_open(const char *path);
void         ol_l2c_close(ol_l2c_file *f);
/* out[10] = {version, dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (>0), seq_len, shared, group_size} */
int          ol_l2c_header(const ol_l2c_file *f, int32_t *out);
int64_t      ol_l2c_numel(const ol_l2c_file *f, int32_t which);   /* elements of one layer's tensor */
const char  *ol_l2c_tensor_name(int32_t which);
/* dst[0..numel) = tensor `which` of `layer` (0 for the unlayered ones) as fp32 (Q8_0 dequantised);
 * an error for +-Inf or NaN, naming tensor, layer and element. Values as stored: no permutation. */
int          ol_l2c_read(const ol_l2c_file *f, int32_t which, int32_t layer, float *dst);
/* vocab_size > 0: exactly that many pieces; <= 0: as many as the file holds */
ol_l2c_tok  *ol_l2c_tok_open(const char *path, int32_t vocab_size);
void         ol_l2c_tok_close(ol_l2c_tok *t);
int32_t      ol_l2c_tok_count(const ol_l2c_tok *t);
int32_t      ol_l2c_tok_max_len(const ol_l2c_tok *t);
/* piece i's bytes (NUL-terminated), its length and score; NULL when i is out of range */
const char  *ol_l2c_tok_piece(const ol_l2c_tok *t, int32_t i, int32_t *len, float *score);

#endif
