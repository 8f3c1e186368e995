/*
 * attention.c — the fused attention variants of QT, SO and BLOG (docs/reference/attention.md), forward
 * and backward side by side, and the per-token head scaling used by gated attention and
 * context-aware scaling.
 *
 * Shapes: q (B,NH,Tq,HD), k and v (B,NH,Tk,HD), out (B,NH,Tq,HD); kp and vp (NH,HD) are the
 * variant's own per-head key/value vectors (k′, v′); pad_mask int32 (B,Tk), 1 = real key.
 * s_ij = q_i·k_j/√HD, visible(i,j) = (not causal or j ≤ i + Tk − Tq) and pad_mask[b,j] ≠ 0.
 *
 * How it is fused (flash-attention style, but with full-width query tiles): threads own
 * (b,h) blocks; each block walks query tiles of TR rows. For a tile it computes the TR×Tk
 * score block with one sgemm, turns it into the weights A that multiply V (the variant's
 * elementwise transform, with row statistics m = row max and l = row normaliser), and does
 * O = A·V with a second sgemm. Only m and l (2 floats per query row) are kept for the
 * backward pass, which recomputes the tile's scores and weights from them: training memory
 * is O(B·NH·T) per layer, never B·NH·T². Causal tiles stop at the last visible key.
 *
 * Each block is computed by one thread in a fixed order with single-threaded sgemm, so
 * results do not depend on the thread count. k′/v′ gradients are summed per block and then
 * over b in order.
 *
 * Per-row formulas (p = weights on the real keys, A = what multiplies V, P′ = sink weight):
 *   softmax          p_j = e^{s_j−m}/l,  m = max_j s_j, l = Σ_j e^{s_j−m}          A = p
 *   clipped_softmax  A_j = clip((ζ−γ)·p_j + γ, 0, 1)      QT eq. (4.1); rows not renormalised
 *   softmax1         m = max(0, max_j s_j), l = e^{−m} + Σ_j e^{s_j−m}, A = p   BLOG ("off by one")
 *   sigmoid          A_j = σ(s_j + b + b_h)   b_h: learnable per-head offset or 0   SO App. D.1
 *   fixed_bias       A = p, out += v′                                   SO Table 2 (b)
 *   ca_bias          A = p, out += P′·v′, P′ = e^{s′}/(e^{s′} + Σ_j e^{s_j}), s′ = q·k′/√HD   SO (c)
 *   attn_bias        softmax over [s, s′]: A_j = e^{s_j−m}/l, P′ = e^{s′−m}/l,
 *                    m = max(s′, max s), l = e^{s′−m} + Σ e^{s_j−m}; out += P′·v′     SO (d)
 *   sink_logit       softmax over [s, s_h] with a learned per-head logit s_h and the sink column
 *                    dropped (gpt-oss): m = max(s_h, max s), l = e^{s_h−m} + Σ e^{s_j−m}, A_j =
 *                    e^{s_j−m}/l, P′ = e^{s_h−m}/l (multiplies nothing). s_h = 0 is softmax1, bit
 *                    for bit (the same m, the same l summed in the same order)
 *   softpick         A_j = ReLU(e^{s_j} − 1)/(Σ_j |e^{s_j} − 1| + ε) (Zuhri, Fuadi, Aji 2025), in
 *                    the official code's stable form: m = max(0, max s) (a constant for backward,
 *                    detached as in the code), c = e^{−m}, e_j = e^{s_j−m}, A_j = ReLU(e_j − c)/l,
 *                    l = Σ_{visible} |e_j − c| + ε (ε added after the rescaling, as the code does;
 *                    for max s < 0 every A_j is 0 either way). Masked entries contribute 0.
 * A row with no visible key gives A = 0 (and P′ = 1 for ca_bias/attn_bias).
 *
 * Attention-probability dropout (QT's BERT; training only): the weights that multiply values
 * become Ã_j = A_j·z_j, P̃′ = P′·z′ with z = 0 with probability p, else 1/(1−p). The mask is
 * counter-based, z_j = keep(seed, row·Tk + j) (row = (b·NH+h)·Tq+i), exactly ol_dropout's mask
 * on the (B,NH,Tq,Tk) probability tensor, so backward redraws it instead of storing it; the
 * sink's z′ = keep(seed ^ SINK_SALT, row). fixed_bias's v′ has weight 1 and is not dropped.
 *
 * Backward of a row, with dA_j = z_j·(dO·v_j) (z ≡ 1 without dropout):
 *   softmax kinds    dp = dA (clipped: dp_j = dA_j·(ζ−γ)·[0 < (ζ−γ)p_j+γ < 1], zero in the
 *                    clipped region), D = Σ_j p_j dp_j, ds_j = p_j (dp_j − D)
 *   sigmoid          ds_j = dA_j·A_j(1 − A_j), db_h = Σ_{b,i,j} ds_ij
 *   ca_bias          dP′ = z′·dO·v′, ds′ = dP′·P′(1−P′), ds_j = p_j (dA_j − D − ds′)
 *   attn_bias        dP′ = z′·dO·v′, D = Σ_j A_j dA_j + P′ dP′, ds_j = A_j(dA_j − D), ds′ = P′(dP′ − D)
 *   sink_logit       D = Σ_j A_j dA_j, ds_j = A_j(dA_j − D), ds_h = Σ_{b,i} −P′_i·D_i (summed per
 *                    (b,h) block in double, then over b in order)
 *   softpick         D = Σ_j A_j dA_j, ds_j = (e_j/l)·(dA_j·[e_j > c] − sgn(e_j − c)·D)
 *                    (from ∂A_i/∂s_j = (e_j/l)([i=j][e_j>c] − A_i sgn(e_j − c)), m constant)
 *   then dq = ds·K/√HD (+ ds′ k′/√HD), dk = dsᵀ·Q/√HD, dv = Ãᵀ·dO, dk′ = Σ_i ds′_i q_i/√HD,
 *   dv′ = Σ_i P̃′_i dO_i (fixed_bias: Σ_i dO_i).
 */
#include "internal.h"
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>

#define TR 64   /* query rows per tile */
#define SINK_SALT 0x9E3779B97F4A7C15ULL   /* the sink weight's dropout stream: seed ^ SINK_SALT */

static const char *kind_names[] = { "softmax", "clipped_softmax", "softmax1", "sigmoid",
                                    "fixed_bias", "ca_bias", "attn_bias", "sink_logit", "softpick" };

typedef struct att_plan {
    int64_t B, NH, Tq, Tk, HD;
    int32_t kind, causal;
    float gamma, zeta, sbias, scale;
    float drop_p, drop_keep;          /* dropout p (0 = off) and 1/(1−p) */
    uint64_t drop_seed, sink_seed;
    const float *bh;                  /* sigmoid: per-head bias offset (NH) or NULL */
    const float *sl;                  /* sink_logit: per-head sink logit s_h (NH) */
    float eps;                        /* softpick: ε */
    const int32_t *pad;      /* (B,Tk) or NULL */
    float *m, *l;            /* row statistics (B,NH,Tq) */
} att_plan;

static inline int has_sink(int kind) { return kind == OL_ATTN_CA_BIAS || kind == OL_ATTN_ATTN_BIAS; }

/* number of keys a tile of rows [i0, i0+R) can see under the causal mask */
static inline int64_t tile_kmax(const att_plan *d, int64_t i0, int64_t R) {
    if (!d->causal) return d->Tk;
    int64_t k = i0 + R + (d->Tk - d->Tq);
    return k < 0 ? 0 : k > d->Tk ? d->Tk : k;
}
/* keys [0, row_kmax) pass the causal test for row i */
static inline int64_t row_kmax(const att_plan *d, int64_t i) {
    if (!d->causal) return d->Tk;
    int64_t k = i + 1 + (d->Tk - d->Tq);
    return k < 0 ? 0 : k > d->Tk ? d->Tk : k;
}

static inline float dotf(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

static inline float sigmf(float x) { return 1.0f / (1.0f + ol__expf(-x)); }

/* padded keys (pad[j] == 0) get weight 0 */
static inline void zero_padded(float *s, const int32_t *pad, int64_t n) {
    for (int64_t j = 0; j < n; j++) s[j] = pad[j] ? s[j] : 0.0f;
}

/* dropout factor z of mask index idx: 0 with probability p, else 1/(1−p) (as ol_dropout) */
static inline float keepf(const att_plan *d, uint64_t seed, uint64_t idx) {
    return ol__u01(seed, idx) < d->drop_p ? 0.0f : d->drop_keep;
}

/*
 * One tile: S (R×kmax, leading dim Tk) = scale·Q_t·K[0:kmax]ᵀ, turned in place into the
 * pre-clip probabilities p (softmax kinds) or A (sigmoid); masked entries become 0.
 * With `fresh` the row statistics are computed and stored, otherwise read (backward).
 * psink[r] receives P′ for the sink kinds.
 */
static void tile_probs(const att_plan *d, int64_t b, int64_t h, int64_t row0, int64_t i0, int64_t R, int64_t kmax,
                       const float *Q, const float *K, const float *kp, float *S, float *psink, int fresh) {
    int64_t Tk = d->Tk, HD = d->HD;
    if (kmax > 0)
        ol__sgemm(0, 1, (int)R, (int)kmax, (int)HD, d->scale,
                    Q + i0 * HD, (int)HD, K, (int)HD, 0.0f, S, (int)Tk);
    const int32_t *pad = d->pad ? d->pad + b * Tk : NULL;
    const float sb = d->bh ? d->sbias + d->bh[h] : d->sbias;   /* sigmoid: b + b_h */
    for (int64_t r = 0; r < R; r++) {
        int64_t i = i0 + r, row = row0 + i, kv = row_kmax(d, i);
        float *s = S + r * Tk;
        for (int64_t j = kv; j < kmax; j++) s[j] = 0.0f;
        /* e^x and σ over every visible column, then the padded ones zeroed: a conditional
         * inside the e^x loop would keep it scalar (the values are the same either way) */
        if (d->kind == OL_ATTN_SIGMOID) {
            for (int64_t j = 0; j < kv; j++) s[j] = sigmf(s[j] + sb);
            if (pad) zero_padded(s, pad, kv);
            continue;
        }
        if (d->kind == OL_ATTN_SOFTPICK) {   /* leaves e_j = e^{s_j−m} (masked 0); tile_softpick makes A */
            float m;
            if (fresh) {
                m = 0.0f;
                for (int64_t j = 0; j < kv; j++)
                    if ((!pad || pad[j]) && s[j] > m) m = s[j];
                d->m[row] = m;
            } else m = d->m[row];
            for (int64_t j = 0; j < kv; j++) s[j] = ol__expf(s[j] - m);
            if (pad) zero_padded(s, pad, kv);
            if (fresh) {
                float c = expf(-m), l = 0.0f;
                for (int64_t j = 0; j < kv; j++)
                    if (!pad || pad[j]) l += fabsf(s[j] - c);
                d->l[row] = l + d->eps;
            }
            continue;
        }
        float sp = has_sink(d->kind) ? d->scale * dotf(Q + i * HD, kp, HD)
                 : d->kind == OL_ATTN_SINK_LOGIT ? d->sl[h] : 0.0f;
        float m, l;
        if (fresh) {
            m = -INFINITY;
            for (int64_t j = 0; j < kv; j++)
                if ((!pad || pad[j]) && s[j] > m) m = s[j];
            if (d->kind == OL_ATTN_SOFTMAX1 && m < 0.0f) m = 0.0f;
            if ((d->kind == OL_ATTN_ATTN_BIAS || d->kind == OL_ATTN_SINK_LOGIT) && sp > m) m = sp;
            if (m == -INFINITY) m = 0.0f;      /* no visible key */
            l = d->kind == OL_ATTN_SOFTMAX1 ? expf(-m)
              : (d->kind == OL_ATTN_ATTN_BIAS || d->kind == OL_ATTN_SINK_LOGIT) ? expf(sp - m) : 0.0f;
            /* e_j = exp(s_j − m) once, in a loop that vectorises (ol__expf), then summed in
             * order (the sum stays serial: no reassociation without fast-math) */
            for (int64_t j = 0; j < kv; j++) s[j] = ol__expf(s[j] - m);
            if (pad) zero_padded(s, pad, kv);
            for (int64_t j = 0; j < kv; j++) l += s[j];
            d->m[row] = m;
            d->l[row] = l;
        } else {
            m = d->m[row];
            l = d->l[row];
            for (int64_t j = 0; j < kv; j++) s[j] = ol__expf(s[j] - m);
            if (pad) zero_padded(s, pad, kv);
        }
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int64_t j = 0; j < kv; j++) s[j] *= inv;
        if (d->kind == OL_ATTN_ATTN_BIAS || d->kind == OL_ATTN_SINK_LOGIT) psink[r] = expf(sp - m) * inv;
        else if (d->kind == OL_ATTN_CA_BIAS) {
            /* P′ = e^{s′}/(e^{s′} + l·e^{m}), evaluated around M = max(s′, m) */
            float M = sp > m ? sp : m, es = expf(sp - M);
            psink[r] = es / (es + l * expf(m - M));
        }
    }
}

/* p -> A = clip((ζ−γ)p + γ, 0, 1) on visible entries (masked entries stay 0) */
static void tile_clip(const att_plan *d, int64_t b, int64_t i0, int64_t R, float *S) {
    const int32_t *pad = d->pad ? d->pad + b * d->Tk : NULL;
    float a = d->zeta - d->gamma;
    for (int64_t r = 0; r < R; r++) {
        int64_t kv = row_kmax(d, i0 + r);
        float *s = S + r * d->Tk;
        if (!pad)   /* the clamp as ol__clampf's blend: nested selects keep the loop scalar on AVX2 */
            for (int64_t j = 0; j < kv; j++) s[j] = ol__clampf(a * s[j] + d->gamma, 0.0f, 1.0f);
        else
            for (int64_t j = 0; j < kv; j++) {
                if (!pad[j]) continue;
                s[j] = ol__clampf(a * s[j] + d->gamma, 0.0f, 1.0f);
            }
    }
}

/* softpick: e -> A = ReLU(e − c)/l with c = e^{−m} (masked entries are 0: e = 0 < c gives 0) */
static inline float softpick_a(float e, float c, float inv) {
    float a = e - c;
    return ol__keepf(a > 0.0f, a * inv);   /* a > 0 ? a·inv : 0 without a branch (AVX2 vectorises it) */
}
static void tile_softpick(const att_plan *d, int64_t row0, int64_t i0, int64_t R, float *S) {
    for (int64_t r = 0; r < R; r++) {
        int64_t row = row0 + i0 + r, kv = row_kmax(d, i0 + r);
        float c = expf(-d->m[row]), l = d->l[row], inv = l > 0.0f ? 1.0f / l : 0.0f;
        float *s = S + r * d->Tk;
        for (int64_t j = 0; j < kv; j++) s[j] = softpick_a(s[j], c, inv);
    }
}

/* A -> Ã = A·z on the tile's visible entries, and P′ -> P̃′ = P′·z′ when psink is given
 * (masked entries are 0 and stay 0) */
static void tile_dropout(const att_plan *d, int64_t row0, int64_t i0, int64_t R, float *S, float *psink) {
    for (int64_t r = 0; r < R; r++) {
        int64_t row = row0 + i0 + r, kv = row_kmax(d, i0 + r);
        float *s = S + r * d->Tk;
        for (int64_t j = 0; j < kv; j++) s[j] *= keepf(d, d->drop_seed, (uint64_t)(row * d->Tk + j));
        if (psink) psink[r] *= keepf(d, d->sink_seed, (uint64_t)row);
    }
}

/* scratch per thread: two TR×Tk tiles and TR sink weights, and with dropout a TR×Tk tile that
 * keeps the backward's mask factors z (drawn once, used for dA and for Ã in dV) */
static int64_t scratch_floats(const att_plan *d) {
    return 2 * TR * d->Tk + TR + 16 + (d->drop_p > 0.0f ? TR * d->Tk : 0);
}

/*
 * Forward over all blocks. out (B,NH,Tq,HD) or NULL; probs (B,NH,Tq,Tk) or NULL; sink
 * (B,NH,Tq) or NULL. v may be NULL when only probabilities are wanted.
 */
/* 1 when every product of the tiles runs on gemm.c's kernel (no call into OpenBLAS, whose
 * OpenMP build must not be entered from the engine's own threads): the blocks then run on
 * the engine's threads (pool.c), else in an OpenMP region. The same bits either way. */
static int att_on_pool(const att_plan *d, int backward) {
    int64_t HD = d->HD;
    for (int64_t i0 = 0; i0 < d->Tq; i0 += TR) {
        int R = (int)(d->Tq - i0 < TR ? d->Tq - i0 : TR), kmax = (int)tile_kmax(d, i0, R);
        if (kmax == 0) continue;
        int ok = ol__gemm_fast_serves(0, 1, R, kmax, (int)HD, d->scale, 0.0f) &&
                 ol__gemm_fast_serves(0, 0, R, (int)HD, kmax, 1.0f, 0.0f);
        if (ok && backward)
            ok = ol__gemm_fast_serves(0, 1, R, kmax, (int)HD, 1.0f, 0.0f) &&
                 ol__gemm_fast_serves(1, 0, kmax, (int)HD, R, 1.0f, 1.0f) &&
                 ol__gemm_fast_serves(0, 0, R, (int)HD, kmax, d->scale, 1.0f) &&
                 ol__gemm_fast_serves(1, 0, kmax, (int)HD, R, d->scale, 1.0f);
        if (!ok) return 0;
    }
    return 1;
}

/* threads that may run blocks: scratch slots by thread id (OpenMP's or the pool's) */
static int att_threads(void) {
    int a = omp_get_max_threads(), b = ol_get_num_threads();
    return a > b ? a : b;
}

typedef struct {
    att_plan *d;
    const float *q, *k, *v, *kp, *vp;
    float *out, *probs, *sink, *scratch;
} att_fwd_job;

/* one (b, h) block of the forward, with thread tid's scratch */
static void att_fwd_block(void *arg, int64_t blk, int tid) {
    const att_fwd_job *j = arg;
    att_plan *d = j->d;
    const float *q = j->q, *k = j->k, *v = j->v, *kp = j->kp, *vp = j->vp;
    float *out = j->out, *probs = j->probs, *sink = j->sink;
    int64_t HD = d->HD, Tq = d->Tq, Tk = d->Tk;
    float *S = j->scratch + (int64_t)tid * scratch_floats(d), *ps = S + 2 * TR * Tk;
    int64_t b = blk / d->NH, h = blk % d->NH, row0 = blk * Tq;
    const float *Q = q + blk * Tq * HD, *K = k + blk * Tk * HD, *V = v ? v + blk * Tk * HD : NULL;
    const float *kph = kp ? kp + h * HD : NULL, *vph = vp ? vp + h * HD : NULL;
    for (int64_t i0 = 0; i0 < Tq; i0 += TR) {
        int64_t R = Tq - i0 < TR ? Tq - i0 : TR, kmax = tile_kmax(d, i0, R);
        tile_probs(d, b, h, row0, i0, R, kmax, Q, K, kph, S, ps, 1);
        if (d->kind == OL_ATTN_CLIPPED) tile_clip(d, b, i0, R, S);
        if (d->kind == OL_ATTN_SOFTPICK) tile_softpick(d, row0, i0, R, S);
        if (probs)
            for (int64_t r = 0; r < R; r++) {
                float *dst = probs + (row0 + i0 + r) * Tk;
                memcpy(dst, S + r * Tk, (size_t)kmax * 4);
                for (int64_t jj = kmax; jj < Tk; jj++) dst[jj] = 0.0f;
            }
        if (sink && (has_sink(d->kind) || d->kind == OL_ATTN_SINK_LOGIT)) memcpy(sink + row0 + i0, ps, (size_t)R * 4);
        if (!out) continue;
        if (d->drop_p > 0.0f) tile_dropout(d, row0, i0, R, S, has_sink(d->kind) ? ps : NULL);
        float *O = out + (blk * Tq + i0) * HD;
        if (kmax > 0)
            ol__sgemm(0, 0, (int)R, (int)HD, (int)kmax, 1.0f,
                        S, (int)Tk, V, (int)HD, 0.0f, O, (int)HD);
        else memset(O, 0, (size_t)(R * HD) * 4);
        if (d->kind == OL_ATTN_FIXED_BIAS)
            for (int64_t r = 0; r < R; r++) for (int64_t c = 0; c < HD; c++) O[r * HD + c] += vph[c];
        if (has_sink(d->kind))
            for (int64_t r = 0; r < R; r++) for (int64_t c = 0; c < HD; c++) O[r * HD + c] += ps[r] * vph[c];
    }
}

/*
 * Forward over all blocks. out (B,NH,Tq,HD) or NULL; probs (B,NH,Tq,Tk) or NULL; sink
 * (B,NH,Tq) or NULL. v may be NULL when only probabilities are wanted.
 */
static int att_forward(att_plan *d, const float *q, const float *k, const float *v, const float *kp,
                       const float *vp, float *out, float *probs, float *sink, ol_ctx *ctx) {
    int nthr = att_threads();
    float *scratch = ol__step_alloc(ctx, (int64_t)nthr * scratch_floats(d) * 4, "attention scratch");
    if (!scratch) return -1;
    int64_t nblk = d->B * d->NH;
    att_fwd_job j = { d, q, k, v, kp, vp, out, probs, sink, scratch };
    if (att_on_pool(d, 0)) ol__par(nblk, att_fwd_block, &j);
    else {
        #pragma omp parallel for schedule(static)
        for (int64_t blk = 0; blk < nblk; blk++) att_fwd_block(&j, blk, omp_get_thread_num());
    }
    return 0;
}

typedef struct att_saved {
    att_plan plan;
    ol_tensor *vp, *pad, *bh;
} att_saved;

typedef struct {
    att_plan *d;
    ol_tensor *q, *k, *v, *kp, *vp;
    const float *dO;
    float *scratch, *pkp, *pvp;
    double *pbh;
    int drop, fq, fk, fv;
    float a;
} att_bwd_job;

/* one (b, h) block of the backward, with thread tid's scratch */
static void att_bwd_block(void *arg, int64_t blk, int tid) {
    const att_bwd_job *jb = arg;
    att_plan *d = jb->d;
    ol_tensor *q = jb->q, *k = jb->k, *v = jb->v, *kp = jb->kp, *vp = jb->vp;
    const float *dO = jb->dO;
    float *pkp = jb->pkp, *pvp = jb->pvp;
    double *pbh = jb->pbh;
    const int drop = jb->drop, fq = jb->fq, fk = jb->fk, fv = jb->fv;
    float a = jb->a;
    int64_t HD = d->HD, Tq = d->Tq, Tk = d->Tk;
    float *S = jb->scratch + (int64_t)tid * scratch_floats(d);
    float *G = S + TR * Tk, *ps = G + TR * Tk, *Z = drop ? ps + TR + 16 : NULL;
    int64_t b = blk / d->NH, h = blk % d->NH, row0 = blk * Tq;
    if (fq) memset(q->grad + blk * Tq * HD, 0, (size_t)(Tq * HD) * 4);
    if (fk) memset(k->grad + blk * Tk * HD, 0, (size_t)(Tk * HD) * 4);
    if (fv) memset(v->grad + blk * Tk * HD, 0, (size_t)(Tk * HD) * 4);
    const float *Q = q->data + blk * Tq * HD, *K = k->data + blk * Tk * HD, *V = v->data + blk * Tk * HD;
    const float *kph = kp ? kp->data + h * HD : NULL, *vph = vp ? vp->data + h * HD : NULL;
    const int32_t *pad = d->pad ? d->pad + b * Tk : NULL;
    for (int64_t i0 = 0; i0 < Tq; i0 += TR) {
        int64_t R = Tq - i0 < TR ? Tq - i0 : TR, kmax = tile_kmax(d, i0, R);
        const float *dOt = dO + (blk * Tq + i0) * HD;
        tile_probs(d, b, h, row0, i0, R, kmax, Q, K, kph, S, ps, 0);
        /* G = dA = dO_t·V[0:kmax]ᵀ */
        if (kmax > 0)
            ol__sgemm(0, 1, (int)R, (int)kmax, (int)HD, 1.0f,
                        dOt, (int)HD, V, (int)HD, 0.0f, G, (int)Tk);
        for (int64_t r = 0; r < R; r++) {
            int64_t i = i0 + r, kv = row_kmax(d, i);
            float *p = S + r * Tk, *g = G + r * Tk;
            const float *dOi = dOt + r * HD;
            for (int64_t j = kv; j < kmax; j++) g[j] = 0.0f;
            if (drop) {   /* dA = z ⊙ dÃ; z kept in Z for Ã below */
                float *z = Z + r * Tk;
                for (int64_t j = 0; j < kv; j++) {
                    z[j] = keepf(d, d->drop_seed, (uint64_t)((row0 + i) * Tk + j));
                    g[j] *= z[j];
                }
            }
            if (d->kind == OL_ATTN_SOFTPICK) {   /* p holds e_j here */
                int64_t row = row0 + i;
                float c = expf(-d->m[row]), l = d->l[row], inv = l > 0.0f ? 1.0f / l : 0.0f, D = 0.0f;
                for (int64_t j = 0; j < kv; j++)
                    if (!pad || pad[j]) D += softpick_a(p[j], c, inv) * g[j];
                for (int64_t j = 0; j < kv; j++) {
                    float w = p[j] * inv;
                    g[j] = (pad && !pad[j]) ? 0.0f : p[j] > c ? w * (g[j] - D) : p[j] < c ? w * D : 0.0f;
                }
                continue;
            }
            if (d->kind == OL_ATTN_SIGMOID) {
                for (int64_t j = 0; j < kv; j++) g[j] = (!pad || pad[j]) ? g[j] * p[j] * (1.0f - p[j]) : 0.0f;
                if (pbh) {
                    double sg = 0;
                    for (int64_t j = 0; j < kv; j++) sg += g[j];
                    pbh[blk] += sg;
                }
                continue;
            }
            if (d->kind == OL_ATTN_CLIPPED)
                for (int64_t j = 0; j < kv; j++) {
                    float c = a * p[j] + d->gamma;
                    g[j] = ol__keepf((c > 0.0f) & (c < 1.0f), g[j] * a);   /* 0 < c < 1 ? g·a : 0 */
                }
            float dsp = 0.0f, D = 0.0f;
            /* sink: z′ and the weight P̃′ = P′·z′ that multiplied v′ */
            float zs = drop && has_sink(d->kind) ? keepf(d, d->sink_seed, (uint64_t)(row0 + i)) : 1.0f;
            float pw = drop ? ps[r] * zs : ps[r];
            for (int64_t j = 0; j < kv; j++) D += p[j] * g[j];
            if (d->kind == OL_ATTN_ATTN_BIAS) {
                float dP = dotf(dOi, vph, HD);
                if (drop) dP *= zs;
                D += ps[r] * dP;
                dsp = ps[r] * (dP - D);
            } else if (d->kind == OL_ATTN_CA_BIAS) {
                float dP = dotf(dOi, vph, HD);
                if (drop) dP *= zs;
                dsp = dP * ps[r] * (1.0f - ps[r]);
                D += dsp;
            }
            if (d->kind == OL_ATTN_SINK_LOGIT && pbh) pbh[blk] -= (double)ps[r] * D;   /* ds_h = −P′·D */
            for (int64_t j = 0; j < kv; j++) g[j] = p[j] * (g[j] - D);   /* masked: p = 0 */
            if (has_sink(d->kind)) {
                if (q->requires_grad) {
                    float *dq = q->grad + (blk * Tq + i) * HD;
                    for (int64_t c = 0; c < HD; c++) dq[c] += d->scale * dsp * kph[c];
                }
                if (pkp) for (int64_t c = 0; c < HD; c++) pkp[blk * HD + c] += d->scale * dsp * Q[i * HD + c];
                if (pvp) for (int64_t c = 0; c < HD; c++) pvp[blk * HD + c] += pw * dOi[c];
            }
            if (d->kind == OL_ATTN_FIXED_BIAS && pvp)
                for (int64_t c = 0; c < HD; c++) pvp[blk * HD + c] += dOi[c];
        }
        if (kmax == 0) continue;
        if (d->kind == OL_ATTN_CLIPPED) tile_clip(d, b, i0, R, S);
        if (d->kind == OL_ATTN_SOFTPICK) tile_softpick(d, row0, i0, R, S);
        if (drop)   /* Ã = A ⊙ z */
            for (int64_t r = 0; r < R; r++) {
                int64_t kv = row_kmax(d, i0 + r);
                for (int64_t j = 0; j < kv; j++) S[r * Tk + j] *= Z[r * Tk + j];
            }
        if (v->requires_grad)   /* dV[0:kmax] += Ãᵀ·dO_t */
            ol__sgemm(1, 0, (int)kmax, (int)HD, (int)R, 1.0f,
                        S, (int)Tk, dOt, (int)HD, 1.0f, v->grad + blk * Tk * HD, (int)HD);
        if (q->requires_grad)   /* dQ_t += scale·dS·K */
            ol__sgemm(0, 0, (int)R, (int)HD, (int)kmax, d->scale,
                        G, (int)Tk, K, (int)HD, 1.0f, q->grad + (blk * Tq + i0) * HD, (int)HD);
        if (k->requires_grad)   /* dK[0:kmax] += scale·dSᵀ·Q_t */
            ol__sgemm(1, 0, (int)kmax, (int)HD, (int)R, d->scale,
                        G, (int)Tk, Q + i0 * HD, (int)HD, 1.0f, k->grad + blk * Tk * HD, (int)HD);
    }
}

static void attention_backward(ol_node *nd) {
    att_saved *sv = nd->saved;
    att_plan *d = &sv->plan;
    ol_tensor *q = nd->in[0], *k = nd->in[1], *v = nd->in[2], *kp = nd->in[3], *vp = sv->vp, *bh = sv->bh;
    ol_ctx *ctx = q->ctx;
    const float *dO = nd->out->grad;
    int64_t nblk = d->B * d->NH, HD = d->HD;
    int need_kp = kp && kp->requires_grad, need_vp = vp && vp->requires_grad, need_bh = bh && bh->requires_grad;
    float *gkp = need_kp ? ol__grad(kp) : NULL, *gvp = need_vp ? ol__grad(vp) : NULL;
    float *gbh = need_bh ? ol__grad(bh) : NULL;
    int nthr = att_threads();
    float *scratch = ol__step_alloc(ctx, (int64_t)nthr * scratch_floats(d) * 4, "attention backward scratch");
    /* per-block partial sums of dk′, dv′ and db_h, reduced over b in order afterwards */
    float *pkp = need_kp ? ol__step_alloc(ctx, nblk * HD * 4, "attention backward") : NULL;
    float *pvp = need_vp ? ol__step_alloc(ctx, nblk * HD * 4, "attention backward") : NULL;
    double *pbh = need_bh ? ol__step_alloc(ctx, nblk * 8, "attention backward") : NULL;
    if (!scratch || (need_kp && (!pkp || !gkp)) || (need_vp && (!pvp || !gvp)) || (need_bh && (!pbh || !gbh))) return;
    if (pkp) memset(pkp, 0, (size_t)(nblk * HD) * 4);
    if (pvp) memset(pvp, 0, (size_t)(nblk * HD) * 4);
    if (pbh) memset(pbh, 0, (size_t)nblk * 8);
    const int drop = d->drop_p > 0.0f;
    float a = d->zeta - d->gamma;
    /* pending (write-first) gradients of q, k, v: each block zero-fills its own slice */
    int fq = q->requires_grad && ol__grad_first(q), fk = k->requires_grad && ol__grad_first(k);
    int fv = v->requires_grad && ol__grad_first(v);
    att_bwd_job jb = { d, q, k, v, kp, vp, dO, scratch, pkp, pvp, pbh, drop, fq, fk, fv, a };
    if (att_on_pool(d, 1)) ol__par(nblk, att_bwd_block, &jb);
    else {
        #pragma omp parallel for schedule(static)
        for (int64_t blk = 0; blk < nblk; blk++) att_bwd_block(&jb, blk, omp_get_thread_num());
    }
    for (int64_t h = 0; h < d->NH; h++)
        for (int64_t b = 0; b < d->B; b++)
            for (int64_t c = 0; c < HD; c++) {
                if (pkp) gkp[h * HD + c] += pkp[(b * d->NH + h) * HD + c];
                if (pvp) gvp[h * HD + c] += pvp[(b * d->NH + h) * HD + c];
            }
    if (pbh)
        for (int64_t h = 0; h < d->NH; h++) {
            double sg = 0;
            for (int64_t b = 0; b < d->B; b++) sg += pbh[b * d->NH + h];
            gbh[h] += (float)sg;
        }
}

/* Validate the inputs and fill the plan; returns 0 or -1 with the error set. */
static int att_check(const char *op, ol_tensor *q, ol_tensor *k, ol_tensor *v, ol_tensor *kp, ol_tensor *vp,
                     ol_tensor *pad, const ol_attn_cfg *cfg, att_plan *d) {
    if (!cfg) OL_FAIL_INT("%s: NULL config", op);
    if (cfg->kind < 0 || cfg->kind > OL_ATTN_SOFTPICK)
        OL_FAIL_INT("%s: unknown kind %d (valid: 0 softmax, 1 clipped_softmax, 2 softmax1, 3 sigmoid, "
                    "4 fixed_bias, 5 ca_bias, 6 attn_bias, 7 sink_logit, 8 softpick)", op, cfg->kind);
    const char *kn = kind_names[cfg->kind];
    if (ol__check_f32(op, q) || ol__check_f32(op, k) || (v && ol__check_f32(op, v))) return -1;
    if (q->ndim != 4 || k->ndim != 4 || (v && v->ndim != 4))
        OL_FAIL_INT("%s (%s): q '%s' %s, k '%s' %s, v must be 4-D (B,NH,T,HD)", op, kn, q->name, OL_SHAPE(q),
                    k->name, OL_SHAPE(k));
    if (k->shape[0] != q->shape[0] || k->shape[1] != q->shape[1] || k->shape[3] != q->shape[3])
        OL_FAIL_INT("%s (%s): k '%s' %s does not match q '%s' %s in B, NH or HD", op, kn, k->name, OL_SHAPE(k),
                    q->name, OL_SHAPE(q));
    if (v && (v->shape[0] != k->shape[0] || v->shape[1] != k->shape[1] || v->shape[2] != k->shape[2] ||
              v->shape[3] != k->shape[3]))
        OL_FAIL_INT("%s (%s): v '%s' %s must have the shape of k '%s' %s", op, kn, v->name, OL_SHAPE(v), k->name, OL_SHAPE(k));
    d->B = q->shape[0]; d->NH = q->shape[1]; d->Tq = q->shape[2]; d->Tk = k->shape[2]; d->HD = q->shape[3];
    if (d->HD < 1 || d->Tk > INT32_MAX || d->HD > INT32_MAX)
        OL_FAIL_INT("%s (%s): bad head dim or sequence length in q '%s' %s", op, kn, q->name, OL_SHAPE(q));
    int need_kp = has_sink(cfg->kind), need_vp = need_kp || cfg->kind == OL_ATTN_FIXED_BIAS;
    if (need_kp != (kp != NULL))
        OL_FAIL_INT("%s (%s): k′ (kp) must be %s", op, kn, need_kp ? "given as (NH,HD)" : "NULL for this kind");
    if (v && need_vp != (vp != NULL))
        OL_FAIL_INT("%s (%s): v′ (vp) must be %s", op, kn, need_vp ? "given as (NH,HD)" : "NULL for this kind");
    ol_tensor *extra[2] = { kp, vp };
    for (int e = 0; e < 2; e++) {
        ol_tensor *t = extra[e];
        if (!t) continue;
        if (ol__check_f32(op, t)) return -1;
        if (t->ndim != 2 || t->shape[0] != d->NH || t->shape[1] != d->HD)
            OL_FAIL_INT("%s (%s): %s '%s' %s must be (NH,HD) = (%lld,%lld)", op, kn, e ? "v′" : "k′", t->name,
                        OL_SHAPE(t), (long long)d->NH, (long long)d->HD);
    }
    d->pad = NULL;
    if (pad) {
        if (ol__check_live(op, pad)) return -1;
        if (pad->dtype != OL_I32 || pad->ndim != 2 || pad->shape[0] != d->B || pad->shape[1] != d->Tk)
            OL_FAIL_INT("%s (%s): pad_mask '%s' %s must be int32 (B,Tk) = (%lld,%lld)", op, kn, pad->name,
                        OL_SHAPE(pad), (long long)d->B, (long long)d->Tk);
        d->pad = pad->idata;
    }
    if (cfg->kind == OL_ATTN_CLIPPED && !(cfg->gamma <= 0.0f && cfg->zeta >= 1.0f))
        OL_FAIL_INT("%s (clipped_softmax): need gamma <= 0 and zeta >= 1, got gamma %g zeta %g", op,
                    (double)cfg->gamma, (double)cfg->zeta);
    if (cfg->kind == OL_ATTN_SIGMOID && !isfinite(cfg->sigmoid_bias))
        OL_FAIL_INT("%s (sigmoid): bias %g is not finite", op, (double)cfg->sigmoid_bias);
    ol_tensor *bh = cfg->sigmoid_bias_h;
    d->bh = NULL;
    if (bh) {
        if (cfg->kind != OL_ATTN_SIGMOID)
            OL_FAIL_INT("%s (%s): a per-head bias (sigmoid_bias_h '%s') is only for sigmoid", op, kn, bh->name);
        if (ol__check_f32(op, bh)) return -1;
        if (bh->ndim != 1 || bh->shape[0] != d->NH)
            OL_FAIL_INT("%s (sigmoid): per-head bias '%s' %s must be (NH) = (%lld)", op, bh->name, OL_SHAPE(bh),
                        (long long)d->NH);
        d->bh = bh->data;
    }
    ol_tensor *sl = cfg->sink_logit;
    d->sl = NULL;
    if ((cfg->kind == OL_ATTN_SINK_LOGIT) != (sl != NULL))
        OL_FAIL_INT("%s (%s): the sink logit s_h (cfg sink_logit) must be %s", op, kn,
                    sl ? "NULL for this kind" : "given as (NH)");
    if (sl) {
        if (ol__check_f32(op, sl)) return -1;
        if (sl->ndim != 1 || sl->shape[0] != d->NH)
            OL_FAIL_INT("%s (sink_logit): sink logit '%s' %s must be (NH) = (%lld)", op, sl->name, OL_SHAPE(sl),
                        (long long)d->NH);
        d->sl = sl->data;
    }
    if (cfg->kind == OL_ATTN_SOFTPICK && !(cfg->softpick_eps >= 0.0f && isfinite(cfg->softpick_eps)))
        OL_FAIL_INT("%s (softpick): eps %g must be finite and >= 0", op, (double)cfg->softpick_eps);
    d->eps = cfg->softpick_eps;
    if (!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f))
        OL_FAIL_INT("%s (%s): dropout %g not in [0, 1)", op, kn, (double)cfg->dropout);
    d->drop_p = cfg->dropout;
    d->drop_keep = 1.0f / (1.0f - cfg->dropout);
    d->drop_seed = cfg->dropout_seed;
    d->sink_seed = cfg->dropout_seed ^ SINK_SALT;
    d->kind = cfg->kind;
    d->causal = cfg->causal ? 1 : 0;
    d->gamma = cfg->gamma;
    d->zeta = cfg->zeta;
    d->sbias = cfg->sigmoid_bias;
    d->scale = 1.0f / sqrtf((float)d->HD);
    return 0;
}

ol_tensor *ol_attention(ol_tensor *q, ol_tensor *k, ol_tensor *v, ol_tensor *kp, ol_tensor *vp,
                        ol_tensor *pad_mask, const ol_attn_cfg *cfg) {
    att_plan d;
    if (!v) OL_FAIL("attention: v is NULL");
    if (att_check("attention", q, k, v, kp, vp, pad_mask, cfg, &d)) return NULL;
    ol_ctx *ctx = q->ctx;
    int64_t rows = d.B * d.NH * d.Tq;
    ol_tensor *out = ol__new(ctx, OL_F32, 4, q->shape, "attention");
    att_saved *sv = ol__step_alloc(ctx, sizeof *sv, "attention");
    d.m = ol__step_alloc(ctx, rows * 4, "attention row max");
    d.l = ol__step_alloc(ctx, rows * 4, "attention row sum");
    if (!out || !sv || !d.m || !d.l) return NULL;
    /* the per-head scalar parameter with a gradient: b_h (sigmoid) or s_h (sink_logit) */
    ol_tensor *ins[4] = { q, k, v, kp }, *bh = cfg->kind == OL_ATTN_SINK_LOGIT ? cfg->sink_logit : cfg->sigmoid_bias_h;
    int need = ol__needs_grad(ctx, 4, ins) || (vp && ctx->grad_enabled && vp->requires_grad) ||
               (bh && ctx->grad_enabled && bh->requires_grad);
    if (att_forward(&d, q->data, k->data, v->data, kp ? kp->data : NULL, vp ? vp->data : NULL, out->data,
                    NULL, NULL, ctx)) return NULL;
    if (need) {
        ol_node *n = ol__record("attention", attention_backward, out, 4, ins);
        if (!n) return NULL;
        n->write_first = 1;   /* q, k, v: per block (attention_backward); k′ accumulates via ol__grad */
        sv->plan = d;
        sv->vp = vp;
        sv->pad = pad_mask;
        sv->bh = bh;
        n->saved = sv;
        if (vp && vp->requires_grad && !ol__grad(vp)) return NULL;
        if (bh && bh->requires_grad && !ol__grad(bh)) return NULL;
    }
    return out;
}

ol_tensor *ol_attention_probs(ol_tensor *q, ol_tensor *k, ol_tensor *kp, ol_tensor *pad_mask,
                              const ol_attn_cfg *cfg, ol_tensor **sink) {
    att_plan d;
    if (sink) *sink = NULL;
    if (att_check("attention_probs", q, k, NULL, kp, NULL, pad_mask, cfg, &d)) return NULL;
    d.drop_p = 0.0f;   /* probes see the weights before dropout */
    ol_ctx *ctx = q->ctx;
    int64_t rows = d.B * d.NH * d.Tq;
    int64_t ps[4] = { d.B, d.NH, d.Tq, d.Tk }, ss[3] = { d.B, d.NH, d.Tq };
    ol_tensor *p = ol__new(ctx, OL_F32, 4, ps, "attn_probs");
    int sinky = has_sink(d.kind) || d.kind == OL_ATTN_SINK_LOGIT;   /* P′ of k′/v′, or of the sink logit */
    ol_tensor *s = sinky && sink ? ol__new(ctx, OL_F32, 3, ss, "sink_probs") : NULL;
    d.m = ol__step_alloc(ctx, rows * 4, "attention row max");
    d.l = ol__step_alloc(ctx, rows * 4, "attention row sum");
    if (!p || !d.m || !d.l || (sinky && sink && !s)) return NULL;
    if (att_forward(&d, q->data, k->data, NULL, kp ? kp->data : NULL, NULL, NULL, p->data, s ? s->data : NULL, ctx))
        return NULL;
    if (sink) *sink = s;
    return p;
}

/* ------------------------------------------------------------- per-token head scaling */
/* y (B,NH,T,HD), g (B,T,NH): out[b,h,t,:] = g[b,t,h]·y[b,h,t,:]  (QT gated attention, SO S_c).
 * Backward: dy += g·dout, dg[b,t,h] += Σ_c dout[b,h,t,c]·y[b,h,t,c]. */
static void head_scale_backward(ol_node *nd) {
    ol_tensor *y = nd->in[0], *g = nd->in[1], *o = nd->out;
    int64_t B = y->shape[0], NH = y->shape[1], T = y->shape[2], HD = y->shape[3];
    #pragma omp parallel for schedule(static) if (y->numel > OL_PAR_MIN)
    for (int64_t blk = 0; blk < B * NH; blk++) {
        int64_t b = blk / NH, h = blk % NH;
        for (int64_t t = 0; t < T; t++) {
            const float *dout = o->grad + (blk * T + t) * HD, *yr = y->data + (blk * T + t) * HD;
            float gv = g->data[(b * T + t) * NH + h];
            if (y->requires_grad) {
                float *dy = y->grad + (blk * T + t) * HD;
                for (int64_t c = 0; c < HD; c++) dy[c] += gv * dout[c];
            }
            if (g->requires_grad) g->grad[(b * T + t) * NH + h] += dotf(dout, yr, HD);
        }
    }
}

ol_tensor *ol_head_scale(ol_tensor *y, ol_tensor *g) {
    if (ol__check_f32("head_scale", y) || ol__check_f32("head_scale", g)) return NULL;
    if (y->ndim != 4 || g->ndim != 3 || g->shape[0] != y->shape[0] || g->shape[1] != y->shape[2] ||
        g->shape[2] != y->shape[1])
        OL_FAIL("head_scale: y '%s' %s must be (B,NH,T,HD) and g '%s' %s must be (B,T,NH)", y->name, OL_SHAPE(y),
                g->name, OL_SHAPE(g));
    int64_t B = y->shape[0], NH = y->shape[1], T = y->shape[2], HD = y->shape[3];
    ol_tensor *out = ol__new(y->ctx, OL_F32, 4, y->shape, "head_scale");
    if (!out) return NULL;
    #pragma omp parallel for schedule(static) if (y->numel > OL_PAR_MIN)
    for (int64_t blk = 0; blk < B * NH; blk++) {
        int64_t b = blk / NH, h = blk % NH;
        for (int64_t t = 0; t < T; t++) {
            float gv = g->data[(b * T + t) * NH + h];
            const float *yr = y->data + (blk * T + t) * HD;
            float *orow = out->data + (blk * T + t) * HD;
            for (int64_t c = 0; c < HD; c++) orow[c] = gv * yr[c];
        }
    }
    ol_tensor *ins[2] = { y, g };
    if (ol__needs_grad(y->ctx, 2, ins) && !ol__record("head_scale", head_scale_backward, out, 2, ins)) return NULL;
    return out;
}
