/*
 * analysis.c — streaming outlier statistics over activation tensors (docs/reference/metrics.md):
 * moments, per-sequence kurtosis / max inf norm / median / top-k, outlier
 * counts by position, channel and token id (6σ of QT, τ·mean of SO), histograms, running
 * maxima and a global top-k with indices; weight extremal ratios; cumulative attention; row
 * norms.
 *
 * x is (B, T, C). Every per-sequence quantity is computed serially and the per-sequence
 * results are added to the accumulator in sequence order; per-channel sums run over the tokens
 * in order (threads split channels, and split tokens only for counts, maxima and top-k records:
 * ol_stats_update), so the numbers do not depend on the thread count, and feeding the batches
 * one by one gives bit-identical sums to one big batch.
 */
#include "internal.h"
#include <stdlib.h>
#include <omp.h>

#define TOPK_MAX 64
#define REC 6          /* doubles per top-k record: |x|, x, seq, pos, channel, token */
#define QT_KURT_EPS 1e-6   /* QT's code: kurtosis = μ₄ / (s⁴ + 1e-6) */

struct ol_stats {
    ol_stats_spec   spec;
    ol_stats_layout L;
    double         *d;
    int64_t         seq_offset;
    char           *work;       /* ol_stats_update's scratch, kept between updates (grow-only) */
    size_t          work_cap;
};

/* ---------------------------------------------------------------- layout */
static void make_layout(const ol_stats_spec *sp, ol_stats_layout *L) {
    int64_t o = 0, T = sp->T, C = sp->C, V = sp->V, k = sp->topk;
    memset(L, 0, sizeof *L);
    L->n = o++; L->nseq = o++; L->ntok = o++; L->nnonfinite = o++;
    L->s1 = o++; L->s2 = o++; L->s3 = o++; L->s4 = o++; L->sabs = o++;
    L->seq_kurt = o++; L->nseq_kurt = o++; L->seq_maxabs = o++; L->seq_median = o++;
    L->seq_kurt_qt = o++; L->nseq_kurt_qt = o++; L->seq_median_lower = o++;
    L->seq_topk = o; o += k;
    L->nout = o++; L->nout_tok = o++; L->nseq_out = o++;
    L->out_pos = o; o += T;
    L->out_tok_pos = o; o += T;
    L->tok_pos = o; o += T;
    L->out_ch = o; o += C;
    L->sabs_ch = o; o += C;
    L->out_id = o; o += V;
    L->out_tok_id = o; o += V;
    L->tok_id = o; o += V;
    L->hist = o; o += sp->nbins > 0 ? sp->nbins + 2 : 0;
    L->nsum = o;
    L->maxabs = o++; L->maxv = o++; L->negminv = o++;
    L->maxabs_ch = o; o += C;
    L->maxabs_pos = o; o += T;
    L->nmax = o - L->nsum;
    L->topk = o; o += k * REC;
    L->ntopk = k * REC;
    L->size = o;
}

static int check_rule(const char *op, const ol_outlier_rule *r) {
    if (!r) OL_FAIL_INT("%s: NULL outlier rule", op);
    if (r->kind < OL_OUTLIER_NONE || r->kind > OL_OUTLIER_TAU_MEAN)
        OL_FAIL_INT("%s: unknown outlier kind %d (0 none, 1 sigma, 2 tau_mean)", op, r->kind);
    if (r->scope < OL_SCOPE_BATCH || r->scope > OL_SCOPE_FIXED)
        OL_FAIL_INT("%s: unknown outlier scope %d (0 batch, 1 sequence, 2 fixed)", op, r->scope);
    if (r->kind != OL_OUTLIER_NONE && !(r->k > 0))
        OL_FAIL_INT("%s: outlier threshold k must be > 0, got %g", op, r->k);
    if (r->kind == OL_OUTLIER_SIGMA && r->scope == OL_SCOPE_FIXED && !(r->sigma >= 0 && isfinite(r->mu)))
        OL_FAIL_INT("%s: fixed-scope sigma rule needs finite mu and sigma >= 0 (got mu %g, sigma %g)", op,
                    r->mu, r->sigma);
    if (r->kind == OL_OUTLIER_TAU_MEAN && r->scope == OL_SCOPE_FIXED && !(r->mean_abs >= 0))
        OL_FAIL_INT("%s: fixed-scope tau_mean rule needs mean_abs >= 0 (got %g)", op, r->mean_abs);
    return 0;
}

static void clear(ol_stats *s) {
    memset(s->d, 0, (size_t)s->L.size * sizeof(double));
    for (int64_t i = 0; i < s->L.nmax; i++) s->d[s->L.nsum + i] = -INFINITY;
    for (int64_t r = 0; r < s->spec.topk; r++) {
        double *e = s->d + s->L.topk + r * REC;
        e[0] = -1; e[1] = 0; e[2] = e[3] = e[4] = e[5] = -1;
    }
}

ol_stats *ol_stats_new(const ol_stats_spec *sp) {
    if (!sp) OL_FAIL("stats_new: NULL spec");
    if (sp->T < 1 || sp->C < 1 || sp->V < 0)
        OL_FAIL("stats_new: need T >= 1, C >= 1, V >= 0 (got T %lld, C %lld, V %lld)", (long long)sp->T,
                (long long)sp->C, (long long)sp->V);
    if (sp->topk < 1 || sp->topk > TOPK_MAX) OL_FAIL("stats_new: topk %d not in 1..%d", sp->topk, TOPK_MAX);
    if (sp->nbins < 0) OL_FAIL("stats_new: nbins %d < 0", sp->nbins);
    if (sp->nbins > 0) {
        if (!(sp->hist_hi > sp->hist_lo)) OL_FAIL("stats_new: histogram needs hi > lo (got lo %g, hi %g)", sp->hist_lo, sp->hist_hi);
        if (sp->hist_log && !(sp->hist_lo > 0)) OL_FAIL("stats_new: log histogram needs lo > 0 (got %g)", sp->hist_lo);
    }
    if (check_rule("stats_new", &sp->rule)) return NULL;
    ol_stats *s = calloc(1, sizeof *s);
    if (!s) OL_FAIL("stats_new: out of memory");
    s->spec = *sp;
    make_layout(sp, &s->L);
    s->d = malloc((size_t)s->L.size * sizeof(double));
    if (!s->d) {
        long long want = (long long)s->L.size;
        free(s);
        OL_FAIL("stats_new: out of memory for %lld doubles", want);
    }
    clear(s);
    return s;
}

void ol_stats_free(ol_stats *s) {
    if (!s) return;
    free(s->d);
    free(s->work);
    free(s);
}
int ol_stats_reset(ol_stats *s) {
    if (!s) OL_FAIL_INT("stats_reset: NULL accumulator");
    clear(s);
    return 0;
}
const ol_stats_spec *ol_stats_get_spec(const ol_stats *s) { return s ? &s->spec : NULL; }
const ol_stats_layout *ol_stats_get_layout(const ol_stats *s) { return s ? &s->L : NULL; }
double *ol_stats_data(ol_stats *s) { return s ? s->d : NULL; }
int ol_stats_set_seq_offset(ol_stats *s, int64_t off) {
    if (!s) OL_FAIL_INT("stats_set_seq_offset: NULL accumulator");
    if (off < 0) OL_FAIL_INT("stats_set_seq_offset: negative offset %lld", (long long)off);
    s->seq_offset = off - (int64_t)s->d[s->L.nseq];
    return 0;
}

/* ---------------------------------------------------------------- top-k records */
/* Total order of records: |x| descending, then seq, pos, channel ascending. With a total
 * order the top-k of a union is unique, so merging is exact. */
static int rec_before(const double *a, const double *b) {
    if (a[0] != b[0]) return a[0] > b[0];
    if (a[2] != b[2]) return a[2] < b[2];
    if (a[3] != b[3]) return a[3] < b[3];
    return a[4] < b[4];
}
/* insert rec into the sorted list of k records (empty ones have |x| = −1) */
static void topk_insert(double *list, int k, const double *rec) {
    double *last = list + (int64_t)(k - 1) * REC;
    if (!rec_before(rec, last)) return;
    int i = k - 1;
    while (i > 0 && rec_before(rec, list + (int64_t)(i - 1) * REC)) {
        memcpy(list + (int64_t)i * REC, list + (int64_t)(i - 1) * REC, REC * sizeof(double));
        i--;
    }
    memcpy(list + (int64_t)i * REC, rec, REC * sizeof(double));
}

/* ---------------------------------------------------------------- update */
typedef struct seq_res {
    double n, s1, s2, s3, s4, sabs, nonfinite;
    double m2;             /* Σ (x − mean_seq)² */
    double kurt;           /* Pearson kurtosis, NAN if undefined (n < 2 or constant) */
    double kurt_qt;        /* QT's code: μ₄/(s⁴ + 1e-6), NAN if n < 2 (0 for a constant sequence) */
    double maxabs, median; /* median: mean of the two middle values (numpy) */
    double median_lower;   /* the lower middle value (torch.median, SO's code) */
    double topk[TOPK_MAX];
    double ntok;
} seq_res;

static int check_i32(const char *op, const char *what, const ol_tensor *t, int64_t n) {
    if (!t) return 0;
    if (ol__check_live(op, t)) return -1;
    if (t->dtype != OL_I32) OL_FAIL_INT("%s: %s '%s' %s must be int32", op, what, t->name, OL_SHAPE(t));
    if (t->numel != n)
        OL_FAIL_INT("%s: %s '%s' %s must have B·T = %lld elements", op, what, t->name, OL_SHAPE(t), (long long)n);
    return 0;
}

/* x (B, T, C) or (T, C) -> B, T, C */
static int btc(const char *op, const ol_tensor *x, int64_t *B, int64_t *T, int64_t *C) {
    if (ol__check_f32(op, x)) return -1;
    if (x->ndim == 3) { *B = x->shape[0]; *T = x->shape[1]; *C = x->shape[2]; }
    else if (x->ndim == 2) { *B = 1; *T = x->shape[0]; *C = x->shape[1]; }
    else OL_FAIL_INT("%s: x '%s' %s must be (B, T, C) or (T, C)", op, x->name, OL_SHAPE(x));
    return 0;
}

/* Sequence b's moments (in element order), kurtosis, max |x| and top-k |x|. Kurtosis (QT):
 * mean((x − m)⁴) / s⁴ with s² = Σ(x − m)²/(n − 1), over the T·C values; QT's code divides by
 * s⁴ + 1e-6 instead (kurt_qt). The sums are serial chains in element order, whatever else
 * runs beside them (ol_stats_update below). */
static void seq_moments(const float *x, const int32_t *mask, int64_t T, int64_t C, int k, seq_res *r) {
    int64_t n = 0;
    double s1 = 0, s2 = 0, s3 = 0, s4 = 0, sabs = 0, maxabs = 0, nonfinite = 0, ntok = 0;
    double top[TOPK_MAX];                      /* k largest |x|, descending; −1 = empty */
    for (int i = 0; i < k; i++) top[i] = -1;
    for (int64_t t = 0; t < T; t++) {
        if (mask && !mask[t]) continue;
        ntok++;
        const float *xt = x + t * C;
        for (int64_t c = 0; c < C; c++) {
            double v = xt[c];
            if (!isfinite(v)) { nonfinite++; continue; }
            double a = fabs(v), v2 = v * v;
            s1 += v; s2 += v2; s3 += v2 * v; s4 += v2 * v2; sabs += a;
            if (a > maxabs) maxabs = a;
            if (a > top[k - 1]) {
                int i = k - 1;
                while (i > 0 && a > top[i - 1]) { top[i] = top[i - 1]; i--; }
                top[i] = a;
            }
            n++;
        }
    }
    r->n = (double)n; r->s1 = s1; r->s2 = s2; r->s3 = s3; r->s4 = s4; r->sabs = sabs;
    r->nonfinite = nonfinite; r->maxabs = maxabs; r->ntok = ntok;
    r->m2 = 0;
    r->kurt = NAN;
    r->kurt_qt = NAN;
    if (n >= 2) {
        double m = s1 / n, m2 = 0, m4 = 0;
        for (int64_t t = 0; t < T; t++) {
            if (mask && !mask[t]) continue;
            const float *xt = x + t * C;
            for (int64_t c = 0; c < C; c++) {
                double v = xt[c];
                if (!isfinite(v)) continue;
                double d2 = (v - m) * (v - m);
                m2 += d2; m4 += d2 * d2;
            }
        }
        r->m2 = m2;
        double var = m2 / (n - 1);
        if (m2 > 0) r->kurt = (m4 / n) / (var * var);
        r->kurt_qt = (m4 / n) / (var * var + QT_KURT_EPS);
    }
    /* top-k |x| in descending order; missing ones (n < k) count as 0 */
    for (int i = 0; i < k; i++) r->topk[i] = top[i] < 0 ? 0 : top[i];
}

/* Median |x| of a sequence over its finite values of valid tokens: numpy's (the mean of the two
 * middle values when n is even) and torch.median's (the lower of them). A selection, so any
 * exact method gives the same values: a two-level radix select on the bits of |x| (for
 * non-negative floats the unsigned order of the bits is the order of the values), one pass
 * over the high 16 bits and one per bucket that holds a wanted rank. hist: 65536 counters. */
static uint32_t fbits(float a) { uint32_t u; memcpy(&u, &a, 4); return u; }
/* counts of the finite |x| of valid tokens: by their high 16 bits (bucket < 0), or by their
 * low 16 bits among those whose high bits are bucket; returns how many were counted */
static int64_t radix_count(const float *x, const int32_t *mask, int64_t T, int64_t C, uint32_t *hist, int64_t bucket) {
    int64_t n = 0;
    memset(hist, 0, 65536 * sizeof *hist);
    for (int64_t t = 0; t < T; t++) {
        if (mask && !mask[t]) continue;
        const float *xt = x + t * C;
        for (int64_t c = 0; c < C; c++) {
            float a = fabsf(xt[c]);
            if (!isfinite(a)) continue;
            uint32_t u = fbits(a);
            if (bucket < 0) { hist[u >> 16]++; n++; }
            else if ((int64_t)(u >> 16) == bucket) { hist[u & 0xFFFF]++; n++; }
        }
    }
    return n;
}
/* the bin of hist that holds rank r (0-based) of the counted values, and r's rank inside it */
static uint32_t radix_bin(const uint32_t *hist, int64_t r, int64_t *rank_in) {
    int64_t acc = 0;
    uint32_t bin = 0;
    while (acc + hist[bin] <= r) acc += hist[bin++];
    *rank_in = r - acc;
    return bin;
}
static void seq_median(const float *x, const int32_t *mask, int64_t T, int64_t C, uint32_t *hist, seq_res *r) {
    int64_t n = radix_count(x, mask, T, C, hist, -1);
    if (n == 0) { r->median = r->median_lower = NAN; return; }
    int64_t want[2] = { n / 2, n % 2 ? n / 2 : n / 2 - 1 };   /* upper middle, lower middle */
    int64_t rank_in[2];
    uint32_t bucket[2] = { radix_bin(hist, want[0], &rank_in[0]), radix_bin(hist, want[1], &rank_in[1]) };
    float val[2];
    for (int w = 0; w < 2; w++) {
        if (w == 1 && want[1] == want[0]) { val[1] = val[0]; break; }
        radix_count(x, mask, T, C, hist, bucket[w]);
        int64_t unused;
        uint32_t u = (bucket[w] << 16) | radix_bin(hist, rank_in[w], &unused);
        memcpy(&val[w], &u, 4);
    }
    r->median = (n % 2) ? val[0] : 0.5 * ((double)val[0] + (double)val[1]);
    r->median_lower = val[1];
}

/* threshold for the element test, from the rule and the moments of its scope */
typedef struct thr { double mu, lim; int kind; } thr;
static thr make_thr(const ol_outlier_rule *r, double n, double s1, double m2, double sabs) {
    thr t = { 0, INFINITY, r->kind };
    if (r->kind == OL_OUTLIER_SIGMA) {
        double mu, sd;
        if (r->scope == OL_SCOPE_FIXED) { mu = r->mu; sd = r->sigma; }
        else { mu = n > 0 ? s1 / n : 0; sd = n > 1 ? sqrt(m2 / (n - 1)) : 0; }
        t.mu = mu; t.lim = r->k * sd;
    } else if (r->kind == OL_OUTLIER_TAU_MEAN) {
        double ma = r->scope == OL_SCOPE_FIXED ? r->mean_abs : (n > 0 ? sabs / n : 0);
        t.lim = r->k * ma;
    }
    return t;
}
static inline int is_out(const thr *t, double v) {
    if (t->kind == OL_OUTLIER_SIGMA) return fabs(v - t->mu) > t->lim;
    if (t->kind == OL_OUTLIER_TAU_MEAN) return fabs(v) > t->lim;
    return 0;
}

/* Σ (x − mu)² over the valid finite elements of the whole batch (for BATCH scope σ) */
static double batch_m2(const float *x, const int32_t *mask, int64_t B, int64_t T, int64_t C, double mu, double *part) {
    #pragma omp parallel for schedule(static) if (B * T * C > OL_PAR_MIN)
    for (int64_t b = 0; b < B; b++) {
        double s = 0;
        for (int64_t t = 0; t < T; t++) {
            if (mask && !mask[b * T + t]) continue;
            const float *xt = x + (b * T + t) * C;
            for (int64_t c = 0; c < C; c++) {
                double v = xt[c];
                if (isfinite(v)) s += (v - mu) * (v - mu);
            }
        }
        part[b] = s;
    }
    double s = 0;
    for (int64_t b = 0; b < B; b++) s += part[b];
    return s;
}

static int check_ids(const char *op, const ol_tensor *ids, int64_t V) {
    if (!ids || V <= 0) return 0;
    for (int64_t i = 0; i < ids->numel; i++)
        if (ids->idata[i] < 0 || ids->idata[i] >= V)
            OL_FAIL_INT("%s: token id %d at index %lld of '%s' is outside [0, V = %lld)", op, ids->idata[i],
                        (long long)i, ids->name, (long long)V);
    return 0;
}

/* One work item of the second pass over a chunk of tokens: what it saw besides the per-token
 * results, merged in item order afterwards. */
typedef struct tok_part { double maxv, negminv; double *topk, *hist; } tok_part;

#define TOK_CHUNK 32   /* tokens per second-pass item */
#define CH_BLOCK 64    /* channels per second-pass item */

/* scratch of one update, carved from the accumulator's kept buffer */
static void *carve(char **p, size_t bytes) { void *r = *p; *p += (bytes + 63) & ~(size_t)63; return r; }

/*
 * The update runs in phases whose work items are independent, so that the threads share the
 * work of a single long sequence (the analyses of pretrained models probe B = 1, T = 1024):
 *   1. per sequence: its moments (one item) and its median (another item);
 *   2. serially: the per-sequence results added in sequence order, the outlier thresholds;
 *   3. items over channel blocks (per-channel sums, maxima, outlier counts; each channel's
 *      tokens in order, as before) and over chunks of tokens (per-token maxima and outlier
 *      counts, top-k records, histogram, extrema);
 *   4. serially: the token chunks' results in chunk order, the per-token updates in token order.
 * Every floating-point sum is a chain in the same order as one serial pass would take; what is
 * merged across items is counts (integers, exact in double), maxima and the top-k records
 * (a total order), so the accumulator holds the same bits for any thread count.
 */
int ol_stats_update(ol_stats *s, const ol_tensor *x, const ol_tensor *ids, const ol_tensor *mask) {
    const char *op = "stats_update";
    if (!s) OL_FAIL_INT("%s: NULL accumulator", op);
    int64_t B, T, C;
    if (btc(op, x, &B, &T, &C)) return -1;
    const ol_stats_spec *sp = &s->spec;
    if (C != sp->C) OL_FAIL_INT("%s: x '%s' %s has C = %lld channels, the accumulator expects %lld", op, x->name,
                                OL_SHAPE(x), (long long)C, (long long)sp->C);
    if (T > sp->T) OL_FAIL_INT("%s: x '%s' %s has T = %lld positions, the accumulator holds at most %lld", op,
                               x->name, OL_SHAPE(x), (long long)T, (long long)sp->T);
    if (check_i32(op, "ids", ids, B * T) || check_i32(op, "mask", mask, B * T)) return -1;
    if (check_ids(op, ids, sp->V)) return -1;
    if (B == 0 || T == 0) return 0;
    const ol_stats_layout *L = &s->L;
    double *d = s->d;
    const int k = sp->topk;
    const int32_t *mk = mask ? mask->idata : NULL, *id = ids ? ids->idata : NULL;
    const float *xd = x->data;
    const int64_t BT = B * T, ntc = (BT + TOK_CHUNK - 1) / TOK_CHUNK, ncb = (C + CH_BLOCK - 1) / CH_BLOCK;
    const int nthr = omp_get_max_threads();
    const int64_t nh = sp->nbins > 0 ? sp->nbins + 2 : 0;

    size_t need = 64 * (8 + 2 * (size_t)ntc) + (size_t)B * (sizeof(seq_res) + sizeof(thr) + sizeof(double)) + (size_t)BT * 12
                  + (size_t)nthr * 65536 * 4 + (size_t)ntc * (sizeof(tok_part) + ((size_t)k * REC + (size_t)nh) * 8);
    if (need > s->work_cap) {
        char *w = realloc(s->work, need);
        if (!w) OL_FAIL_INT("%s: out of memory for the scratch of x '%s' %s", op, x->name, OL_SHAPE(x));
        s->work = w;
        s->work_cap = need;
    }
    char *wp = s->work;
    seq_res *res = carve(&wp, (size_t)B * sizeof *res);
    thr *ths = carve(&wp, (size_t)B * sizeof *ths);
    double *part = carve(&wp, (size_t)B * sizeof(double));
    double *tmax = carve(&wp, (size_t)BT * sizeof(double));
    int32_t *nout_t = carve(&wp, (size_t)BT * sizeof(int32_t));
    uint32_t *hists = carve(&wp, (size_t)nthr * 65536 * 4);
    tok_part *tp = carve(&wp, (size_t)ntc * sizeof *tp);
    for (int64_t i = 0; i < ntc; i++) {
        tp[i].topk = carve(&wp, (size_t)k * REC * 8);
        tp[i].hist = carve(&wp, (size_t)nh * 8);
    }

    /* 1: per-sequence moments and medians */
    #pragma omp parallel for schedule(dynamic, 1) if (BT * C > OL_PAR_MIN)
    for (int64_t it = 0; it < 2 * B; it++) {
        int64_t b = it % B;
        const float *xb = xd + b * T * C;
        const int32_t *mb = mk ? mk + b * T : NULL;
        if (it < B) seq_moments(xb, mb, T, C, k, &res[b]);
        else seq_median(xb, mb, T, C, hists + (int64_t)omp_get_thread_num() * 65536, &res[b]);
    }

    /* 2: outlier thresholds: BATCH scope μ over the batch, then Σ(x − μ)² (two passes) */
    thr tb = { 0, INFINITY, OL_OUTLIER_NONE };
    const ol_outlier_rule *rule = &sp->rule;
    if (rule->kind != OL_OUTLIER_NONE && rule->scope != OL_SCOPE_SEQUENCE) {
        double n = 0, s1 = 0, sabs = 0, m2 = 0;
        for (int64_t b = 0; b < B; b++) { n += res[b].n; s1 += res[b].s1; sabs += res[b].sabs; }
        if (rule->scope == OL_SCOPE_BATCH && rule->kind == OL_OUTLIER_SIGMA && n > 0)
            m2 = batch_m2(xd, mk, B, T, C, s1 / n, part);
        tb = make_thr(rule, n, s1, m2, sabs);
    }
    const double seq0 = (double)(s->seq_offset + (int64_t)d[L->nseq]);   /* global index of sequence 0 */
    for (int64_t b = 0; b < B; b++) {
        seq_res *r = &res[b];
        d[L->n] += r->n; d[L->nseq] += 1; d[L->ntok] += r->ntok; d[L->nnonfinite] += r->nonfinite;
        d[L->s1] += r->s1; d[L->s2] += r->s2; d[L->s3] += r->s3; d[L->s4] += r->s4; d[L->sabs] += r->sabs;
        if (!isnan(r->kurt)) { d[L->seq_kurt] += r->kurt; d[L->nseq_kurt] += 1; }
        if (!isnan(r->kurt_qt)) { d[L->seq_kurt_qt] += r->kurt_qt; d[L->nseq_kurt_qt] += 1; }
        d[L->seq_maxabs] += r->maxabs;
        if (r->n > 0) { d[L->seq_median] += r->median; d[L->seq_median_lower] += r->median_lower; }
        for (int i = 0; i < k; i++) d[L->seq_topk + i] += r->topk[i];
        ths[b] = rule->scope == OL_SCOPE_SEQUENCE ? make_thr(rule, r->n, r->s1, r->m2, r->sabs) : tb;
    }

    /* 3: channel blocks and token chunks */
    double lg_lo = sp->hist_log ? log10(sp->hist_lo) : sp->hist_lo;
    double lg_hi = sp->hist_log ? log10(sp->hist_hi) : sp->hist_hi;
    double bin_w = sp->nbins > 0 ? (lg_hi - lg_lo) / sp->nbins : 1;
    #pragma omp parallel for schedule(dynamic, 1) if (BT * C > OL_PAR_MIN)
    for (int64_t it = 0; it < ncb + ntc; it++) {
        if (it < ncb) {   /* channels c0..c1 of every valid token, tokens in order */
            int64_t c0 = it * CH_BLOCK, c1 = c0 + CH_BLOCK < C ? c0 + CH_BLOCK : C;
            double *sabs_ch = d + L->sabs_ch, *maxabs_ch = d + L->maxabs_ch, *out_ch = d + L->out_ch;
            for (int64_t bt = 0; bt < BT; bt++) {
                if (mk && !mk[bt]) continue;
                const thr *th = &ths[bt / T];
                const float *xt = xd + bt * C;
                for (int64_t c = c0; c < c1; c++) {
                    double v = xt[c];
                    if (!isfinite(v)) continue;
                    double a = fabs(v);
                    sabs_ch[c] += a;
                    if (a > maxabs_ch[c]) maxabs_ch[c] = a;
                    if (is_out(th, v)) out_ch[c] += 1;
                }
            }
            continue;
        }
        int64_t ci = it - ncb, bt0 = ci * TOK_CHUNK, bt1 = bt0 + TOK_CHUNK < BT ? bt0 + TOK_CHUNK : BT;
        tok_part *q = &tp[ci];
        q->maxv = q->negminv = -INFINITY;
        for (int i = 0; i < k; i++) {
            double *e = q->topk + (int64_t)i * REC;
            e[0] = -1; e[1] = 0; e[2] = e[3] = e[4] = e[5] = -1;
        }
        for (int64_t i = 0; i < nh; i++) q->hist[i] = 0;
        const double *kth = q->topk + (int64_t)(k - 1) * REC;   /* the chunk's current k-th record */
        for (int64_t bt = bt0; bt < bt1; bt++) {
            tmax[bt] = 0;
            nout_t[bt] = 0;
            if (mk && !mk[bt]) continue;
            int64_t b = bt / T, t = bt % T;
            const thr *th = &ths[b];
            double seq = seq0 + (double)b, tok = id ? id[bt] : -1, tm = 0;
            int32_t nout = 0;
            const float *xt = xd + bt * C;
            for (int64_t c = 0; c < C; c++) {
                double v = xt[c];
                if (!isfinite(v)) continue;
                double a = fabs(v);
                if (a > tm) tm = a;
                if (is_out(th, v)) nout++;
                if (sp->nbins > 0) {
                    double u = sp->hist_log ? (a > 0 ? log10(a) : -INFINITY) : v;
                    int64_t bin;
                    if (u < lg_lo) bin = 0;
                    else if (u >= lg_hi) bin = sp->nbins + 1;
                    else {
                        bin = 1 + (int64_t)((u - lg_lo) / bin_w);
                        if (bin > sp->nbins) bin = sp->nbins;
                    }
                    q->hist[bin] += 1;
                }
                if (a >= kth[0]) {
                    double rec[REC] = { a, v, seq, (double)t, (double)c, tok };
                    topk_insert(q->topk, k, rec);
                }
                if (v > q->maxv) q->maxv = v;
                if (-v > q->negminv) q->negminv = -v;
            }
            tmax[bt] = tm;
            nout_t[bt] = nout;
        }
    }

    /* 4: the chunks in order, then the per-token updates in token order */
    for (int64_t ci = 0; ci < ntc; ci++) {
        tok_part *q = &tp[ci];
        for (int i = 0; i < k; i++) {
            const double *e = q->topk + (int64_t)i * REC;
            if (e[0] >= 0) topk_insert(d + L->topk, k, e);
        }
        for (int64_t i = 0; i < nh; i++) d[L->hist + i] += q->hist[i];
        if (q->maxv > d[L->maxv]) d[L->maxv] = q->maxv;
        if (q->negminv > d[L->negminv]) d[L->negminv] = q->negminv;
    }
    const int has_v = sp->V > 0 && id;
    for (int64_t b = 0; b < B; b++) {
        int seq_has_out = 0;
        for (int64_t t = 0; t < T; t++) {
            int64_t bt = b * T + t;
            if (mk && !mk[bt]) continue;
            int32_t tok = id ? id[bt] : -1;
            d[L->tok_pos + t] += 1;
            if (has_v) d[L->tok_id + tok] += 1;
            if (tmax[bt] > d[L->maxabs_pos + t]) d[L->maxabs_pos + t] = tmax[bt];
            if (tmax[bt] > d[L->maxabs]) d[L->maxabs] = tmax[bt];
            int32_t nout = nout_t[bt];
            if (nout > 0) {
                seq_has_out = 1;
                d[L->nout] += (double)nout; d[L->nout_tok] += 1;
                d[L->out_pos + t] += (double)nout; d[L->out_tok_pos + t] += 1;
                if (has_v) { d[L->out_id + tok] += (double)nout; d[L->out_tok_id + tok] += 1; }
            }
        }
        if (seq_has_out) d[L->nseq_out] += 1;
    }
    return 0;
}

int ol_stats_merge(ol_stats *dst, const ol_stats *src) {
    if (!dst || !src) OL_FAIL_INT("stats_merge: NULL accumulator");
    const ol_stats_spec *a = &dst->spec, *b = &src->spec;
    if (a->T != b->T || a->C != b->C || a->V != b->V || a->topk != b->topk || a->nbins != b->nbins ||
        a->hist_log != b->hist_log || a->hist_lo != b->hist_lo || a->hist_hi != b->hist_hi ||
        a->rule.kind != b->rule.kind || a->rule.scope != b->rule.scope || a->rule.k != b->rule.k)
        OL_FAIL_INT("stats_merge: accumulators have different specs (T %lld/%lld, C %lld/%lld, V %lld/%lld, "
                    "topk %d/%d, bins %d/%d, rule %d/%d)", (long long)a->T, (long long)b->T, (long long)a->C,
                    (long long)b->C, (long long)a->V, (long long)b->V, a->topk, b->topk, a->nbins, b->nbins,
                    a->rule.kind, b->rule.kind);
    const ol_stats_layout *L = &dst->L;
    double nseq_before = dst->d[L->nseq];
    for (int64_t i = 0; i < L->nsum; i++) dst->d[i] += src->d[i];
    for (int64_t i = L->nsum; i < L->nsum + L->nmax; i++)
        if (src->d[i] > dst->d[i]) dst->d[i] = src->d[i];
    for (int r = 0; r < a->topk; r++) {
        const double *e = src->d + L->topk + (int64_t)r * REC;
        if (e[0] >= 0) topk_insert(dst->d + L->topk, a->topk, e);
    }
    /* keep the next sequence index of dst where it was */
    dst->seq_offset -= (int64_t)(dst->d[L->nseq] - nseq_before);
    return 0;
}

/* ---------------------------------------------------------------- token flags */
int64_t ol_outlier_token_flags(const ol_tensor *x, const ol_outlier_rule *rule, const ol_tensor *mask,
                               int32_t *flags, double *tok_maxabs) {
    const char *op = "outlier_token_flags";
    int64_t B, T, C;
    if (btc(op, x, &B, &T, &C)) return -1;
    if (check_rule(op, rule) || check_i32(op, "mask", mask, B * T)) return -1;
    if (!flags) OL_FAIL_INT("%s: NULL flags buffer", op);
    const int32_t *mk = mask ? mask->idata : NULL;
    /* moments per sequence in element order, batch totals in sequence order */
    double *mom = calloc((size_t)(B * 4 + 1), sizeof(double));   /* n, s1, sabs, m2 per sequence */
    if (!mom) OL_FAIL_INT("%s: out of memory", op);
    for (int64_t b = 0; b < B; b++) {
        double n = 0, s1 = 0, sabs = 0;
        for (int64_t t = 0; t < T; t++) {
            if (mk && !mk[b * T + t]) continue;
            const float *xt = x->data + (b * T + t) * C;
            for (int64_t c = 0; c < C; c++) {
                double v = xt[c];
                if (!isfinite(v)) continue;
                n++; s1 += v; sabs += fabs(v);
            }
        }
        mom[4 * b] = n; mom[4 * b + 1] = s1; mom[4 * b + 2] = sabs;
        if (rule->scope == OL_SCOPE_SEQUENCE && rule->kind == OL_OUTLIER_SIGMA && n > 0) {
            double mu = s1 / n, m2 = 0;
            for (int64_t t = 0; t < T; t++) {
                if (mk && !mk[b * T + t]) continue;
                const float *xt = x->data + (b * T + t) * C;
                for (int64_t c = 0; c < C; c++) if (isfinite(xt[c])) m2 += (xt[c] - mu) * (xt[c] - mu);
            }
            mom[4 * b + 3] = m2;
        }
    }
    thr tb = { 0, INFINITY, OL_OUTLIER_NONE };
    if (rule->kind != OL_OUTLIER_NONE && rule->scope != OL_SCOPE_SEQUENCE) {
        double n = 0, s1 = 0, sabs = 0, m2 = 0;
        for (int64_t b = 0; b < B; b++) { n += mom[4 * b]; s1 += mom[4 * b + 1]; sabs += mom[4 * b + 2]; }
        if (rule->scope == OL_SCOPE_BATCH && rule->kind == OL_OUTLIER_SIGMA && n > 0) {
            double *part = malloc((size_t)B * sizeof(double));
            if (!part) { free(mom); OL_FAIL_INT("%s: out of memory", op); }
            m2 = batch_m2(x->data, mk, B, T, C, s1 / n, part);
            free(part);
        }
        tb = make_thr(rule, n, s1, m2, sabs);
    }
    int64_t count = 0;
    for (int64_t b = 0; b < B; b++) {
        thr th = rule->scope == OL_SCOPE_SEQUENCE
                     ? make_thr(rule, mom[4 * b], mom[4 * b + 1], mom[4 * b + 3], mom[4 * b + 2]) : tb;
        for (int64_t t = 0; t < T; t++) {
            int64_t bt = b * T + t;
            int f = 0;
            double mx = 0;
            if (!mk || mk[bt]) {
                const float *xt = x->data + bt * C;
                for (int64_t c = 0; c < C; c++) {
                    double v = xt[c];
                    if (!isfinite(v)) continue;
                    if (fabs(v) > mx) mx = fabs(v);
                    if (is_out(&th, v)) f = 1;
                }
            }
            flags[bt] = f;
            count += f;
            if (tok_maxabs) tok_maxabs[bt] = mx;
        }
    }
    free(mom);
    return count;
}

/* ---------------------------------------------------------------- weights */
/* W (O, I): per column j: max_i |w_ij| / mean_i |w_ij|; per row i: max_j / mean_j (SO §3.2's
 * extremal ratio); weight outliers |w_ij| > tau · mean_j |w_ij| (SO §3 eq. for O_weight, the
 * mean taken along row i), counted per column and per row. */
int ol_weight_stats(const ol_tensor *w, double tau, double *col_ratio, double *row_ratio, double *col_out,
                    double *row_out) {
    const char *op = "weight_stats";
    if (ol__check_f32(op, w)) return -1;
    if (w->ndim != 2) OL_FAIL_INT("%s: weight '%s' %s must be 2-D (O, I)", op, w->name, OL_SHAPE(w));
    if (!(tau > 0)) OL_FAIL_INT("%s: tau must be > 0, got %g", op, tau);
    int64_t O = w->shape[0], I = w->shape[1];
    double *cmax = calloc((size_t)I * 2, sizeof(double));
    if (!cmax) OL_FAIL_INT("%s: out of memory", op);
    double *csum = cmax + I;
    if (col_out) memset(col_out, 0, (size_t)I * sizeof(double));
    for (int64_t i = 0; i < O; i++) {
        const float *wr = w->data + i * I;
        double rsum = 0, rmax = 0;
        for (int64_t j = 0; j < I; j++) {
            double a = fabs((double)wr[j]);
            rsum += a;
            if (a > rmax) rmax = a;
            csum[j] += a;
            if (a > cmax[j]) cmax[j] = a;
        }
        double rmean = I > 0 ? rsum / I : 0;
        if (row_ratio) row_ratio[i] = rmean > 0 ? rmax / rmean : (rmax > 0 ? INFINITY : 0);
        double lim = tau * rmean, nr = 0;
        for (int64_t j = 0; j < I; j++) {
            if (fabs((double)wr[j]) > lim) {
                nr++;
                if (col_out) col_out[j] += 1;
            }
        }
        if (row_out) row_out[i] = nr;
    }
    if (col_ratio)
        for (int64_t j = 0; j < I; j++) {
            double m = O > 0 ? csum[j] / O : 0;
            col_ratio[j] = m > 0 ? cmax[j] / m : (cmax[j] > 0 ? INFINITY : 0);
        }
    free(cmax);
    return 0;
}

/* ---------------------------------------------------------------- attention */
/* A (B, NH, Tq, Tk), qmask (B, Tq) or NULL -> out (B, NH, Tk): Â_j = Σ_i A_ij over the
 * unmasked queries i, summed in query order (SO §3, attention outliers). */
int ol_attn_cumulative(const ol_tensor *a, const ol_tensor *qmask, double *out) {
    const char *op = "attn_cumulative";
    if (ol__check_f32(op, a)) return -1;
    if (a->ndim != 4) OL_FAIL_INT("%s: attention '%s' %s must be (B, NH, Tq, Tk)", op, a->name, OL_SHAPE(a));
    if (!out) OL_FAIL_INT("%s: NULL output buffer", op);
    int64_t B = a->shape[0], NH = a->shape[1], Tq = a->shape[2], Tk = a->shape[3];
    if (check_i32(op, "query mask", qmask, B * Tq)) return -1;
    const int32_t *mk = qmask ? qmask->idata : NULL;
    #pragma omp parallel for schedule(static) if (a->numel > OL_PAR_MIN)
    for (int64_t bh = 0; bh < B * NH; bh++) {
        int64_t b = bh / NH;
        double *o = out + bh * Tk;
        for (int64_t j = 0; j < Tk; j++) o[j] = 0;
        for (int64_t i = 0; i < Tq; i++) {
            if (mk && !mk[b * Tq + i]) continue;
            const float *row = a->data + (bh * Tq + i) * Tk;
            for (int64_t j = 0; j < Tk; j++) o[j] += row[j];
        }
    }
    return 0;
}

/* x (R, D) -> out (R): ‖x_r‖₂ in double (QT Fig. 3e: value magnitude of each token). */
int ol_row_norms(const ol_tensor *x, double *out) {
    const char *op = "row_norms";
    if (ol__check_f32(op, x)) return -1;
    if (!out) OL_FAIL_INT("%s: NULL output buffer", op);
    int64_t D = ol__last(x), R = ol__rows(x);
    #pragma omp parallel for schedule(static) if (x->numel > OL_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x->data + r * D;
        double s = 0;
        for (int64_t c = 0; c < D; c++) s += (double)xr[c] * xr[c];
        out[r] = sqrt(s);
    }
    return 0;
}
