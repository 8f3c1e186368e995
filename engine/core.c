/*
 * core.c — errors, threads, the context and its arenas, tensors, parameters, fills, the
 * RNG and the autograd tape walk (ol_backward).
 */
#define _GNU_SOURCE
#include "internal.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <omp.h>
#include <cblas.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

/* OpenBLAS' own thread control (declared here: not every cblas.h has it). */
extern void openblas_set_num_threads(int num_threads);

static _Thread_local char g_err[1024];

const char *ol_error(void) { return g_err; }
void ol_clear_error(void) { g_err[0] = 0; }
const char *ol_version(void) { return "outlierlab-engine 0.1.0"; }

void ol__set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
}

const char *ol__shape_str(const ol_tensor *t, char *buf) {
    if (!t) { strcpy(buf, "(null)"); return buf; }
    int n = 0;
    n += snprintf(buf + n, 64 - n, "(");
    for (int i = 0; i < t->ndim && n < 60; i++)
        n += snprintf(buf + n, 64 - n, i ? ",%lld" : "%lld", (long long)t->shape[i]);
    snprintf(buf + n, 64 - n, ")");
    return buf;
}

/* ---------------------------------------------------------------- subnormals
 * ol_set_flush_subnormals(1) makes every thread that computes store a float result smaller
 * in magnitude than FLT_MIN (a subnormal) as 0 (flush-to-zero); 0 restores IEEE gradual
 * underflow, the default. On x86 a subnormal result or operand takes a microcode assist of
 * tens of cycles: attention probabilities of ~1e-38 and their gradients made the gemm
 * microkernel of the recipe map's lr 0.03 organism take 2.7× the time of the same steps
 * flushed (docs/reference/training.md, "Subnormals"). It changes numbers wherever a subnormal occurs, so
 * it is a training setting (train cfg.flush_subnormals, part of a model's spec), not a default.
 * The mode is per thread: set on the calling thread and on the OpenMP team here, on the pool's
 * workers when they next take an item (pool.c, work), again on the team whenever
 * ol_set_num_threads changes it, and a new thread inherits its creator's mode; so every thread
 * that computes has the same mode and the results stay independent of the thread count.
 * Operands already subnormal (read from a file) are used as they are. */
_Atomic int ol__fp_flush = 0;        /* the requested mode */
_Atomic unsigned ol__fp_gen = 0;     /* bumped at every change (the pool's workers compare) */

/* the control register that holds the mode and its flush-to-zero bit (0: no such mode here) */
#if defined(__x86_64__) || defined(__i386__)
#define FP_FZ ((uint64_t)_MM_FLUSH_ZERO_ON)
static uint64_t fp_reg(void) { return _mm_getcsr(); }
static void fp_reg_set(uint64_t r) { _mm_setcsr((unsigned)r); }
#elif defined(__aarch64__)
#define FP_FZ ((uint64_t)1 << 24)   /* FPCR.FZ */
static uint64_t fp_reg(void) { uint64_t r; __asm__ volatile("mrs %0, fpcr" : "=r"(r)); return r; }
static void fp_reg_set(uint64_t r) { __asm__ volatile("msr fpcr, %0" : : "r"(r)); }
#else
#define FP_FZ ((uint64_t)0)
static uint64_t fp_reg(void) { return 0; }
static void fp_reg_set(uint64_t r) { (void)r; }
#endif

void ol__fp_apply(int on) {
    uint64_t r = fp_reg();
    fp_reg_set(on ? (r | FP_FZ) : (r & ~FP_FZ));
}

static void fp_apply_team(int n, int on) {
    ol__fp_apply(on);
    #pragma omp parallel num_threads(n)
    ol__fp_apply(on);
}

void ol_set_flush_subnormals(int on) {
    on = on ? 1 : 0;
    atomic_store(&ol__fp_flush, on);
    atomic_fetch_add(&ol__fp_gen, 1u);
    fp_apply_team(ol_get_num_threads(), on);
}

int ol_flushes_subnormals(void) { return FP_FZ != 0 && (fp_reg() & FP_FZ) != 0; }

/* ---------------------------------------------------------------- threads */
static int g_threads = 0;

void ol_set_num_threads(int n) {
    if (n <= 0) {
        const char *e = getenv("OMP_NUM_THREADS");
        n = e ? atoi(e) : 0;
        if (n <= 0) n = omp_get_num_procs();
    }
    g_threads = n;
    omp_set_num_threads(n);
    fp_apply_team(n, atomic_load(&ol__fp_flush));   /* the team's threads all in the current mode */
    /* (OpenBLAS's OpenMP build needs one buffer per OpenMP thread that calls it concurrently:
     * it runs single-threaded inside a parallel region, but its thread count must be the team's) */
    openblas_set_num_threads(n);
}
int ol_get_num_threads(void) {
    if (g_threads == 0) ol_set_num_threads(0);
    return g_threads;
}

/* ---------------------------------------------------------------- arenas */
static void *reserve(int64_t bytes) {
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

int ol__arena_init(ol_arena *a, int64_t cap, const char *what) {
    a->used = a->peak = 0;
    a->cap = cap;
    a->base = reserve(cap);
    if (!a->base) OL_FAIL_INT("ctx: cannot reserve %lld bytes for the %s arena", (long long)cap, what);
    return 0;
}

void ol__arena_free(ol_arena *a) {
    if (a->base) munmap(a->base, (size_t)a->cap);
    a->base = NULL;
}

void *ol__arena_alloc(ol_arena *a, int64_t bytes, const char *what) {
    if (bytes < 0) OL_FAIL("%s: negative allocation size", what);
    int64_t aligned = (bytes + 63) & ~(int64_t)63;
    if (aligned < bytes || a->used > a->cap - aligned)
        OL_FAIL("%s: out of memory: need %lld bytes, arena has %lld of %lld free",
                what, (long long)bytes, (long long)(a->cap - a->used), (long long)a->cap);
    void *p = a->base + a->used;
    a->used += aligned;
    if (a->used > a->peak) a->peak = a->used;
    return p;
}

/* ---------------------------------------------------------------- context */
static int hdr_ring_init(ol_ctx *c);   /* the step-tensor header ring (see make() below) */
ol_ctx *ol_ctx_new(int64_t param_capacity, int64_t step_capacity) {
    ol_get_num_threads();
    if (param_capacity <= 0) param_capacity = (int64_t)1 << 30;
    if (step_capacity <= 0) step_capacity = (int64_t)1 << 35;
    if (param_capacity > ((int64_t)1 << 40) / 4)
        OL_FAIL("ctx: param_capacity %lld floats is too large", (long long)param_capacity);
    ol_ctx *c = calloc(1, sizeof *c);
    if (!c) OL_FAIL("ctx: out of memory");
    c->param_cap = param_capacity;
    c->params_mapped_bytes = param_capacity * 4 * 4;
    char *flat = reserve(c->params_mapped_bytes);
    if (!flat) {
        free(c);
        OL_FAIL("ctx: cannot reserve %lld bytes for parameters, gradients and AdamW state",
                (long long)(param_capacity * 16));
    }
    c->params = (float *)flat;
    c->grads = c->params + param_capacity;
    c->adam_m = c->grads + param_capacity;
    c->adam_v = c->adam_m + param_capacity;
    if (ol__arena_init(&c->persist, (int64_t)1 << 34, "persistent") != 0 || hdr_ring_init(c) != 0 ||
        ol__arena_init(&c->step, step_capacity, "step") != 0) {
        munmap(flat, (size_t)c->params_mapped_bytes);
        ol__arena_free(&c->persist);
        free(c);
        return NULL;
    }
    c->gen = 1;
    c->grad_enabled = 1;
    return c;
}

void ol_ctx_free(ol_ctx *c) {
    if (!c) return;
    munmap(c->params, (size_t)c->params_mapped_bytes);
    ol__arena_free(&c->persist);
    ol__arena_free(&c->step);
    for (int i = 0; i < 32; i++) free(c->shard_buf[i]);
    free(c->ptab);
    free(c);
}

int ol_set_grad_enabled(ol_ctx *c, int enabled) {
    int old = c->grad_enabled;
    c->grad_enabled = enabled ? 1 : 0;
    return old;
}
int ol_grad_enabled(ol_ctx *c) { return c->grad_enabled; }

void ol_step_reset(ol_ctx *c) {
    c->step.used = 0;
    c->tape = NULL;
    c->gen++;
}
int64_t ol_step_bytes_used(ol_ctx *c) { return c->step.used; }
int64_t ol_step_bytes_peak(ol_ctx *c) { return c->step.peak; }
void ol_step_reset_peak(ol_ctx *c) { c->step.peak = c->step.used; }

void *ol__step_alloc(ol_ctx *c, int64_t bytes, const char *what) {
    return ol__arena_alloc(&c->step, bytes, what);
}

/* ---------------------------------------------------------------- tensors */
int64_t ol__numel(int32_t ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] != 0 && n > INT64_MAX / 4 / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

static int check_shape(const char *what, int32_t ndim, const int64_t *shape, int64_t *numel) {
    if (ndim < 1 || ndim > 4) OL_FAIL_INT("%s: ndim %d not in 1..4", what, ndim);
    if (!shape) OL_FAIL_INT("%s: NULL shape", what);
    int64_t n = ol__numel(ndim, shape);
    if (n < 0) OL_FAIL_INT("%s: shape has a negative dim or its size overflows", what);
    *numel = n;
    return 0;
}

/* Step tensor headers live in a ring of OL_HDR_RING structs at the start of the persistent
 * arena, not in the step arena: after ol_step_reset the step arena is reused from offset 0,
 * so a header kept there by the caller would be overwritten by a new tensor's header and a
 * stale handle would silently alias the new tensor. In the ring, an old header keeps its
 * generation (and so is reported as stale) until OL_HDR_RING newer tensors have been made.
 * A step that makes more tensors than the ring holds takes the rest from the step arena. */
#define OL_HDR_RING 65536
typedef struct { int64_t head, used; uint64_t gen; int64_t pad[5]; } hdr_ring;   /* 64 bytes */

static int hdr_ring_init(ol_ctx *c) {
    hdr_ring *r = ol__arena_alloc(&c->persist, (int64_t)sizeof(hdr_ring) + (int64_t)OL_HDR_RING * (int64_t)sizeof(ol_tensor),
                                  "tensor header ring");
    if (!r) return -1;
    memset(r, 0, sizeof *r);
    return 0;
}

ol_tensor *ol__step_header(ol_ctx *c, const char *what) {
    hdr_ring *r = (hdr_ring *)c->persist.base;   /* the ring is the first persistent allocation */
    if (r->gen != c->gen) { r->gen = c->gen; r->used = 0; }
    if (r->used >= OL_HDR_RING) return ol__arena_alloc(&c->step, sizeof(ol_tensor), what);
    ol_tensor *t = (ol_tensor *)(r + 1) + r->head;
    r->head = (r->head + 1) % OL_HDR_RING;
    r->used++;
    return t;
}

static ol_tensor *make(ol_ctx *c, ol_arena *a, uint64_t gen, int32_t dtype, int32_t ndim,
                       const int64_t *shape, const char *name) {
    int64_t n;
    if (!c) OL_FAIL("tensor_new: NULL context");
    if (dtype != OL_F32 && dtype != OL_I32) OL_FAIL("tensor_new '%s': unknown dtype %d", name ? name : "", dtype);
    if (check_shape("tensor_new", ndim, shape, &n) != 0) return NULL;
    /* data first: a failed allocation then leaves no header behind */
    void *d = ol__arena_alloc(a, n * 4, name && *name ? name : "tensor_new");
    if (!d) return NULL;
    ol_tensor *t = a == &c->step ? ol__step_header(c, "tensor_new") : ol__arena_alloc(a, sizeof *t, "tensor_new");
    if (!t) return NULL;
    memset(t, 0, sizeof *t);
    t->data = d;
    t->idata = d;
    t->ctx = c;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = n;
    t->dtype = dtype;
    t->param_index = -1;
    t->gen = gen;
    if (name) snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

ol_tensor *ol__new(ol_ctx *c, int32_t dtype, int32_t ndim, const int64_t *shape, const char *name) {
    return make(c, &c->step, c->gen, dtype, ndim, shape, name);
}
ol_tensor *ol_tensor_new(ol_ctx *c, int32_t dtype, int32_t ndim, const int64_t *shape, const char *name) {
    if (!c) OL_FAIL("tensor_new: NULL context");
    return make(c, &c->step, c->gen, dtype, ndim, shape, name);
}
ol_tensor *ol_tensor_new_persistent(ol_ctx *c, int32_t dtype, int32_t ndim, const int64_t *shape, const char *name) {
    if (!c) OL_FAIL("tensor_new_persistent: NULL context");
    return make(c, &c->persist, 0, dtype, ndim, shape, name);
}

void ol_tensor_set_name(ol_tensor *t, const char *name) {
    if (t && name) snprintf(t->name, sizeof t->name, "%s", name);
}

int ol_tensor_set_requires_grad(ol_tensor *t, int32_t flag) {
    if (!t) OL_FAIL_INT("set_requires_grad: NULL tensor");
    if (t->dtype != OL_F32 && flag) OL_FAIL_INT("set_requires_grad: '%s' is int32 and has no gradient", t->name);
    t->requires_grad = flag ? 1 : 0;
    return 0;
}

float *ol_tensor_grad(ol_tensor *t) {
    if (ol__check_f32("tensor_grad", t)) return NULL;
    return ol__grad(t);
}

int ol_tensor_zero_grad(ol_tensor *t) {
    if (ol__check_f32("tensor_zero_grad", t)) return -1;
    if (t->grad) memset(t->grad, 0, (size_t)t->numel * 4);
    t->grad_pending = 0;
    return 0;
}

int ol__check_live(const char *op, const ol_tensor *t) {
    if (!t) OL_FAIL_INT("%s: input tensor is NULL (an earlier op failed?)", op);
    if (t->gen != 0 && t->gen != t->ctx->gen)
        OL_FAIL_INT("%s: tensor '%s' %s belongs to a step that was reset", op, t->name, OL_SHAPE(t));
    return 0;
}

int ol__check_f32(const char *op, const ol_tensor *t) {
    if (ol__check_live(op, t) != 0) return -1;
    if (t->dtype != OL_F32) OL_FAIL_INT("%s: tensor '%s' %s must be float32", op, t->name, OL_SHAPE(t));
    return 0;
}

/* ---------------------------------------------------------------- parameters */
ol_tensor *ol_param(ol_ctx *c, const char *name, int32_t ndim, const int64_t *shape) {
    int64_t n;
    if (!c) OL_FAIL("param: NULL context");
    if (check_shape("param", ndim, shape, &n) != 0) return NULL;
    int64_t aligned = (n + 15) & ~(int64_t)15;   /* 64-byte aligned slices */
    if (c->param_used > c->param_cap - aligned)
        OL_FAIL("param '%s': flat parameter buffer full (%lld of %lld floats used, need %lld)",
                name ? name : "", (long long)c->param_used, (long long)c->param_cap, (long long)n);
    if (c->nparams == c->ptab_cap) {
        int32_t nc = c->ptab_cap ? c->ptab_cap * 2 : 64;
        ol_param_info *np = realloc(c->ptab, (size_t)nc * sizeof *np);
        if (!np) OL_FAIL("param '%s': out of memory for the parameter table", name ? name : "");
        c->ptab = np;
        c->ptab_cap = nc;
    }
    ol_tensor *t = ol__arena_alloc(&c->persist, sizeof *t, "param");
    if (!t) return NULL;
    memset(t, 0, sizeof *t);
    t->data = c->params + c->param_used;
    t->idata = (int32_t *)t->data;
    t->grad = c->grads + c->param_used;
    t->ctx = c;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = n;
    t->dtype = OL_F32;
    t->requires_grad = 1;
    t->param_index = c->nparams;
    t->gen = 0;
    if (name) snprintf(t->name, sizeof t->name, "%s", name);
    /* The slice is fresh: the flat buffers are anonymous mappings (zero pages) and slices are
     * never handed out twice, so gradient and AdamW slices are already 0. Not touching them keeps
     * them out of the resident set until training uses them: an analysis of a pretrained model
     * then costs 4 bytes per parameter, not 16. */
    memset(t->data, 0, (size_t)aligned * 4);
    c->ptab[c->nparams].t = t;
    c->ptab[c->nparams].offset = c->param_used;
    c->ptab[c->nparams].group = 0;
    c->nparams++;
    c->param_used += aligned;
    return t;
}

int32_t ol_param_count(ol_ctx *c) { return c->nparams; }
ol_tensor *ol_param_get(ol_ctx *c, int32_t i) {
    if (i < 0 || i >= c->nparams) OL_FAIL("param_get: index %d not in 0..%d", i, c->nparams - 1);
    return c->ptab[i].t;
}
int ol_param_set_group(ol_tensor *p, int32_t g) {
    if (!p || p->param_index < 0) OL_FAIL_INT("param_set_group: not a parameter");
    if (g < 0 || g > 255) OL_FAIL_INT("param_set_group: group %d not in 0..255", g);
    p->ctx->ptab[p->param_index].group = g;
    return 0;
}
int32_t ol_param_group(ol_tensor *p) { return p && p->param_index >= 0 ? p->ctx->ptab[p->param_index].group : -1; }
int64_t ol_param_offset(ol_tensor *p) { return p && p->param_index >= 0 ? p->ctx->ptab[p->param_index].offset : -1; }
int64_t ol_params_numel(ol_ctx *c) { return c->param_used; }
float *ol_params_data(ol_ctx *c) { return c->params; }
float *ol_grads_data(ol_ctx *c) { return c->grads; }
float *ol_adam_m_data(ol_ctx *c) { return c->adam_m; }
float *ol_adam_v_data(ol_ctx *c) { return c->adam_v; }
void ol_zero_grad(ol_ctx *c) { ol__zero(c->grads, c->param_used); }

/* ---------------------------------------------------------------- RNG and fills */
uint64_t ol__hash64(uint64_t seed, uint64_t idx) {
    /* splitmix64 finaliser over a mix of seed and index */
    uint64_t z = seed * 0x9E3779B97F4A7C15ULL + idx * 0xD1B54A32D192ED03ULL + 0x632BE59BD9B4E019ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

double ol_rand_uniform(uint64_t seed, uint64_t index) {
    return (double)(ol__hash64(seed, index) >> 11) * (1.0 / 9007199254740992.0);
}

int ol_fill(ol_tensor *t, float v) {
    if (ol__check_live("fill", t) != 0) return -1;
    if (t->dtype == OL_I32) { for (int64_t i = 0; i < t->numel; i++) t->idata[i] = (int32_t)v; }
    else for (int64_t i = 0; i < t->numel; i++) t->data[i] = v;
    return 0;
}

int ol_fill_normal(ol_tensor *t, float mean, float std, uint64_t seed) {
    if (ol__check_f32("fill_normal", t) != 0) return -1;
    for (int64_t i = 0; i < t->numel; i++) {
        /* Box-Muller on two independent uniforms for element i */
        double u1 = ((ol__hash64(seed, 2 * (uint64_t)i) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
        double u2 = (ol__hash64(seed, 2 * (uint64_t)i + 1) >> 11) * (1.0 / 9007199254740992.0);
        t->data[i] = mean + std * (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    return 0;
}

int ol_fill_uniform(ol_tensor *t, float lo, float hi, uint64_t seed) {
    if (ol__check_f32("fill_uniform", t) != 0) return -1;
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] = lo + (hi - lo) * (float)ol_rand_uniform(seed, (uint64_t)i);
    return 0;
}

int ol_copy_into(ol_tensor *dst, const ol_tensor *src) {
    if (ol__check_live("copy_into", dst) != 0 || ol__check_live("copy_into", src) != 0) return -1;
    if (dst->numel != src->numel || dst->dtype != src->dtype)
        OL_FAIL_INT("copy_into: '%s' %s and '%s' %s differ in size or dtype",
                    dst->name, OL_SHAPE(dst), src->name, OL_SHAPE(src));
    memcpy(dst->data, src->data, (size_t)src->numel * 4);
    return 0;
}

/* ---------------------------------------------------------------- autograd */
int ol__needs_grad(ol_ctx *c, int n, ol_tensor *const *ins) {
    if (!c->grad_enabled) return 0;
    for (int i = 0; i < n; i++)
        if (ins[i] && ins[i]->requires_grad) return 1;
    return 0;
}

ol_node *ol__record(const char *op, ol_backward_fn fn, ol_tensor *out, int n, ol_tensor *const *ins) {
    ol_ctx *c = out->ctx;
    ol_node *nd = ol__arena_alloc(&c->step, sizeof *nd, op);
    if (!nd) return NULL;
    memset(nd, 0, sizeof *nd);
    nd->backward = fn;
    nd->op = op;
    nd->out = out;
    nd->nin = n;
    for (int i = 0; i < n && i < 4; i++) nd->in[i] = ins[i];
    nd->prev = c->tape;
    c->tape = nd;
    out->requires_grad = 1;
    return nd;
}

/* zero n floats; large buffers in parallel chunks (the gradients of a training step are zeroed
 * before the backward walk: on small models that is a tenth of the step) */
void ol__zero(float *p, int64_t n) {
    if (n < 4 * OL_PAR_MIN) { memset(p, 0, (size_t)n * 4); return; }
    const int64_t chunk = 16384;
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i += chunk) memset(p + i, 0, (size_t)(i + chunk <= n ? chunk : n - i) * 4);
}

/* ------------------------------------------------------------------ step profile
 * Where a training step's time goes (make bench: bench/organism.lua): seconds in the
 * matmul/linear products (ops_matmul.c, forward and backward), in backward nodes (all of them,
 * and those of the fused attention kernel), accumulated while profiling is on. Timing happens
 * on the calling thread around whole products and nodes, so threads inside are included. */
int g_prof_on = 0;
static double g_prof[OL_PROF_N];
void ol__prof_add(int what, double seconds) { if (what >= 0 && what < OL_PROF_N) g_prof[what] += seconds; }
void ol_profile_enable(int on) { g_prof_on = on ? 1 : 0; }
void ol_profile_reset(void) { for (int i = 0; i < OL_PROF_N; i++) g_prof[i] = 0; }
double ol_profile_seconds(int32_t what) { return what >= 0 && what < OL_PROF_N ? g_prof[what] : 0.0; }

float *ol__grad(ol_tensor *t) {
    if (!t->grad) {
        /* a persistent leaf keeps its gradient across steps (zero it with ol_tensor_zero_grad) */
        ol_arena *a = t->gen == 0 ? &t->ctx->persist : &t->ctx->step;
        t->grad = ol__arena_alloc(a, t->numel * 4, "grad");
        if (t->grad) ol__zero(t->grad, t->numel);
        t->grad_pending = 0;
    } else if (t->grad_pending) {
        ol__zero(t->grad, t->numel);
        t->grad_pending = 0;
    }
    return t->grad;
}

/* ol_backward's allocation of an input's gradient: a step tensor's new buffer is left
 * unwritten and marked pending (internal.h, write-first gradients); a persistent leaf's is
 * zero-filled (it accumulates across steps). */
static int g_write_first = 1;
int ol_set_write_first(int on) {
    int old = g_write_first;
    g_write_first = on ? 1 : 0;
    return old;
}
static float *grad_alloc_pending(ol_tensor *t) {
    if (t->grad) return t->grad;
    if (t->gen == 0 || !g_write_first) return ol__grad(t);
    t->grad = ol__arena_alloc(&t->ctx->step, t->numel * 4, "grad");
    if (t->grad) t->grad_pending = 1;
    return t->grad;
}

/* zero-fill the pending gradient of t (it stays 0: nothing wrote it) */
static void settle(ol_tensor *t) {
    if (t && t->grad && t->grad_pending) { ol__zero(t->grad, t->numel); t->grad_pending = 0; }
}

/* after the walk (or a failed one): gradients nobody wrote are 0, as callers read them */
static void settle_tape(ol_node *tape) {
    for (ol_node *n = tape; n; n = n->prev) {
        settle(n->out);
        for (int i = 0; i < n->nin; i++) settle(n->in[i]);
    }
}

int ol_backward(ol_tensor *loss) {
    if (ol__check_f32("backward", loss) != 0) return -1;
    if (loss->numel != 1) OL_FAIL_INT("backward: loss '%s' %s must have one element", loss->name, OL_SHAPE(loss));
    if (!loss->requires_grad) OL_FAIL_INT("backward: loss '%s' does not depend on any tensor that requires grad", loss->name);
    ol_ctx *c = loss->ctx;
    /* The loss must be the output of a node on the current tape (unless it is itself a
     * parameter or persistent leaf): a second backward over a consumed tape would
     * otherwise silently add nothing. */
    if (loss->gen != 0) {
        ol_node *n = c->tape;
        while (n && n->out != loss) n = n->prev;
        if (!n)
            OL_FAIL_INT("backward: loss '%s' %s is not on the tape: backward already ran over it "
                        "(recompute the loss to accumulate again)", loss->name, OL_SHAPE(loss));
    }
    /* Preallocate every needed gradient before walking: an arena failure then happens
     * before any accumulation, so no gradient is left half-updated. */
    for (ol_node *n = c->tape; n; n = n->prev)
        for (int i = 0; i < n->nin; i++)
            if (n->in[i] && n->in[i]->requires_grad && !grad_alloc_pending(n->in[i])) goto nomem;
    if (!ol__grad(loss)) goto nomem;
    loss->grad[0] += 1.0f;
    /* A backward fn can fail only in an arena allocation (which sets the error): detect it
     * through the error string, which is cleared first. */
    ol_clear_error();
    ol_node *tape = c->tape;
    for (ol_node *n = c->tape; n; n = n->prev) {
        if (!n->out->grad) continue;
        settle(n->out);   /* no consumer wrote it: its gradient is 0 */
        if (!n->write_first)
            for (int i = 0; i < n->nin; i++) settle(n->in[i]);
        if (g_prof_on) {
            double t0 = omp_get_wtime();
            n->backward(n);
            double dt = omp_get_wtime() - t0;
            ol__prof_add(OL_PROF_BACKWARD, dt);
            if (strncmp(n->op, "attention", 9) == 0) ol__prof_add(OL_PROF_ATTENTION_BWD, dt);
        } else {
            n->backward(n);
        }
        if (g_err[0]) {
            char msg[sizeof g_err];
            snprintf(msg, sizeof msg, "%s", g_err);
            settle_tape(tape);
            c->tape = NULL;
            OL_FAIL_INT("backward: %s backward of '%s' %s failed (gradients are incomplete): %s",
                        n->op, n->out->name, OL_SHAPE(n->out), msg);
        }
    }
    settle_tape(tape);
    c->tape = NULL;
    return 0;
nomem: {
        char msg[sizeof g_err];
        snprintf(msg, sizeof msg, "%s", g_err);
        settle_tape(c->tape);
        OL_FAIL_INT("backward: cannot allocate gradients for loss '%s' (nothing accumulated yet): %s", loss->name, msg);
    }
}
