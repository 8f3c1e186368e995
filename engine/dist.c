/*
 * dist.c — data parallelism over MPI: rank/size of the current communicator (the world, or
 * a group made by ol_dist_split for sweeps), one MPI_Allreduce over the flat gradient
 * buffer, exact reductions for analysis accumulators, parameter broadcast and a
 * cross-rank parameter checksum. Without MPI_Init (a plain LuaJIT process) every call
 * behaves as a single rank.
 */
#include "internal.h"
#include <mpi.h>
#include <limits.h>
#include <stdlib.h>
#include <time.h>
#include <signal.h>

static MPI_Comm g_comm = MPI_COMM_NULL;   /* current communicator; NULL = world */

static int active(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}
static MPI_Comm comm(void) { return g_comm == MPI_COMM_NULL ? MPI_COMM_WORLD : g_comm; }

int ol_dist_initialized(void) { return active(); }

int ol_dist_rank(void) {
    if (!active()) return 0;
    int r;
    MPI_Comm_rank(comm(), &r);
    return r;
}
int ol_dist_size(void) {
    if (!active()) return 1;
    int s;
    MPI_Comm_size(comm(), &s);
    return s;
}
int ol_dist_world_rank(void) {
    if (!active()) return 0;
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
int ol_dist_world_size(void) {
    if (!active()) return 1;
    int s;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
}

static int mpi_fail(const char *op, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    OL_FAIL_INT("%s: MPI error on rank %d: %s", op, ol_dist_world_rank(), msg);
}

int ol_dist_split(int32_t color) {
    if (!active()) return 0;
    if (color < 0) OL_FAIL_INT("dist_split: color %d must be >= 0", color);
    MPI_Comm nc;
    int rc = MPI_Comm_split(MPI_COMM_WORLD, color, ol_dist_world_rank(), &nc);
    if (rc != MPI_SUCCESS) return mpi_fail("dist_split", rc);
    if (g_comm != MPI_COMM_NULL) MPI_Comm_free(&g_comm);
    g_comm = nc;
    return 0;
}

int ol_dist_unsplit(void) {
    if (active() && g_comm != MPI_COMM_NULL) MPI_Comm_free(&g_comm);
    g_comm = MPI_COMM_NULL;
    return 0;
}

/* In-place allreduce in chunks that fit MPI's int counts. */
static int allreduce(void *buf, int64_t n, MPI_Datatype ty, int64_t size, MPI_Op op, const char *what) {
    char *p = buf;
    while (n > 0) {
        int cnt = n > INT_MAX / 2 ? INT_MAX / 2 : (int)n;
        int rc = MPI_Allreduce(MPI_IN_PLACE, p, cnt, ty, op, comm());
        if (rc != MPI_SUCCESS) return mpi_fail(what, rc);
        p += (int64_t)cnt * size;
        n -= cnt;
    }
    return 0;
}

/* grads[0:P] = Σ_ranks grads (average != 0: divided by the number of ranks). One call over
 * the whole flat buffer. */
int ol_dist_allreduce_grads(ol_ctx *c, int32_t average) {
    if (!c) OL_FAIL_INT("dist_allreduce_grads: NULL context");
    int n = ol_dist_size();
    if (n == 1) return 0;
    if (allreduce(c->grads, c->param_used, MPI_FLOAT, 4, MPI_SUM, "dist_allreduce_grads")) return -1;
    if (average) ol_grad_scale(c, 1.0f / (float)n);
    return 0;
}

/* ---- rank-invariant gradient sums: a fixed binary tree over the shards ---------------- */
static void add_into(float *restrict a, const float *restrict b, int64_t n) {
    #pragma omp parallel for simd schedule(static) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
}
static void copy_par(float *restrict a, const float *restrict b, int64_t n) {
    #pragma omp parallel for simd schedule(static) if (n > OL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) a[i] = b[i];
}

/* the stack's buffers hold param_used floats; parameters made later grow them */
static int shard_bufs(ol_ctx *c) {
    if (c->shard_cap == c->param_used) return 0;
    if (c->shard_n > 0) OL_FAIL_INT("grad_shard_push: parameters were added between shards");
    for (int i = 0; i < 32; i++) { free(c->shard_buf[i]); c->shard_buf[i] = NULL; }
    c->shard_cap = c->param_used;
    return 0;
}

int ol_grad_shard_push(ol_ctx *c) {
    if (!c) OL_FAIL_INT("grad_shard_push: NULL context");
    if (shard_bufs(c)) return -1;
    int64_t n = c->param_used;
    if (c->shard_n >= 31) OL_FAIL_INT("grad_shard_push: more than 2^31 shards");
    int top = c->shard_n;
    if (!c->shard_buf[top]) {
        c->shard_buf[top] = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        if (!c->shard_buf[top]) OL_FAIL_INT("grad_shard_push: out of memory for a gradient buffer of %lld floats", (long long)n);
    }
    copy_par(c->shard_buf[top], c->grads, n);
    c->shard_lvl[top] = 0;
    c->shard_n++;
    /* carry: two subtrees of the same level become one (older + newer) */
    while (c->shard_n >= 2 && c->shard_lvl[c->shard_n - 1] == c->shard_lvl[c->shard_n - 2]) {
        int a = c->shard_n - 2, b = c->shard_n - 1;
        add_into(c->shard_buf[a], c->shard_buf[b], n);
        c->shard_lvl[a]++;
        c->shard_n--;
    }
    ol__zero(c->grads, n);
    return 0;
}

int ol_grad_shard_finish(ol_ctx *c) {
    if (!c) OL_FAIL_INT("grad_shard_finish: NULL context");
    if (c->shard_n == 0) return 0;
    int n_ = c->shard_n;
    c->shard_n = 0;
    if (n_ != 1)
        OL_FAIL_INT("grad_shard_finish: the number of shards pushed is not a power of two (%d subtrees left)", n_);
    copy_par(c->grads, c->shard_buf[0], c->param_used);
    return 0;
}

/* Recursive doubling: at level l, rank r exchanges its partial sum with rank r XOR 2^l and
 * both add (float addition is commutative, so both get the same bits): after log2(n) levels
 * every rank holds the sum over the fixed tree ((r0+r1)+(r2+r3))... */
int ol_dist_allreduce_grads_tree(ol_ctx *c, float scale) {
    if (!c) OL_FAIL_INT("dist_allreduce_grads_tree: NULL context");
    int size = ol_dist_size(), rank = ol_dist_rank();
    int64_t n = c->param_used;
    if (size > 1) {
        if (size & (size - 1))
            OL_FAIL_INT("dist_allreduce_grads_tree: %d ranks: rank-invariant sums need a power-of-two rank count", size);
        float *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        if (!tmp) OL_FAIL_INT("dist_allreduce_grads_tree: out of memory");
        for (int l = 1; l < size; l <<= 1) {
            int partner = rank ^ l;
            for (int64_t off = 0; off < n; ) {
                int cnt = n - off > INT_MAX / 2 ? INT_MAX / 2 : (int)(n - off);
                int rc = MPI_Sendrecv(c->grads + off, cnt, MPI_FLOAT, partner, 77, tmp + off, cnt, MPI_FLOAT, partner, 77,
                                      comm(), MPI_STATUS_IGNORE);
                if (rc != MPI_SUCCESS) { free(tmp); return mpi_fail("dist_allreduce_grads_tree", rc); }
                off += cnt;
            }
            add_into(c->grads, tmp, n);
        }
        free(tmp);
    }
    if (scale != 1.0f) ol_grad_scale(c, scale);
    return 0;
}

static MPI_Op op_of(int32_t op) { return op == 1 ? MPI_MAX : op == 2 ? MPI_MIN : MPI_SUM; }

int ol_dist_allreduce_f64(double *buf, int64_t n, int32_t op) {
    if (ol_dist_size() == 1) return 0;
    if (op < 0 || op > 2) OL_FAIL_INT("dist_allreduce_f64: op %d not in 0 (sum), 1 (max), 2 (min)", op);
    return allreduce(buf, n, MPI_DOUBLE, 8, op_of(op), "dist_allreduce_f64");
}
int ol_dist_allreduce_f32(float *buf, int64_t n, int32_t op) {
    if (ol_dist_size() == 1) return 0;
    if (op < 0 || op > 2) OL_FAIL_INT("dist_allreduce_f32: op %d not in 0 (sum), 1 (max), 2 (min)", op);
    return allreduce(buf, n, MPI_FLOAT, 4, op_of(op), "dist_allreduce_f32");
}
int ol_dist_allreduce_i64(int64_t *buf, int64_t n, int32_t op) {
    if (ol_dist_size() == 1) return 0;
    if (op < 0 || op > 2) OL_FAIL_INT("dist_allreduce_i64: op %d not in 0 (sum), 1 (max), 2 (min)", op);
    return allreduce(buf, n, MPI_INT64_T, 8, op_of(op), "dist_allreduce_i64");
}

/* Gather n doubles from every rank into out[size·n] on every rank, in rank order (for
 * merges that are not elementwise, such as top-k lists). */
int ol_dist_allgather_f64(const double *in, int64_t n, double *out) {
    if (ol_dist_size() == 1) { memcpy(out, in, (size_t)n * 8); return 0; }
    if (n > INT_MAX) OL_FAIL_INT("dist_allgather_f64: %lld values exceed MPI's count range", (long long)n);
    int rc = MPI_Allgather(in, (int)n, MPI_DOUBLE, out, (int)n, MPI_DOUBLE, comm());
    return rc == MPI_SUCCESS ? 0 : mpi_fail("dist_allgather_f64", rc);
}

int ol_dist_allgather_i64(const int64_t *in, int64_t n, int64_t *out) {
    if (ol_dist_size() == 1) { memcpy(out, in, (size_t)n * 8); return 0; }
    if (n > INT_MAX) OL_FAIL_INT("dist_allgather_i64: %lld values exceed MPI's count range", (long long)n);
    int rc = MPI_Allgather(in, (int)n, MPI_INT64_T, out, (int)n, MPI_INT64_T, comm());
    return rc == MPI_SUCCESS ? 0 : mpi_fail("dist_allgather_i64", rc);
}

/* Gather n bytes from every rank (counts[r] from rank r, known beforehand) into out, in
 * rank order. Used to merge analysis state kept as Lua tables. */
int ol_dist_allgatherv_bytes(const void *in, int64_t n, const int64_t *counts, void *out) {
    int size = ol_dist_size();
    if (size == 1) { memcpy(out, in, (size_t)n); return 0; }
    int *cnt = malloc((size_t)size * sizeof *cnt), *disp = malloc((size_t)size * sizeof *disp);
    if (!cnt || !disp) { free(cnt); free(disp); OL_FAIL_INT("dist_allgatherv_bytes: out of memory"); }
    int64_t off = 0;
    for (int r = 0; r < size; r++) {
        if (counts[r] > INT_MAX || off > INT_MAX) {
            free(cnt); free(disp);
            OL_FAIL_INT("dist_allgatherv_bytes: %lld bytes exceed MPI's count range", (long long)(off + counts[r]));
        }
        cnt[r] = (int)counts[r];
        disp[r] = (int)off;
        off += counts[r];
    }
    int rc = MPI_Allgatherv(in, (int)n, MPI_BYTE, out, cnt, disp, MPI_BYTE, comm());
    free(cnt);
    free(disp);
    return rc == MPI_SUCCESS ? 0 : mpi_fail("dist_allgatherv_bytes", rc);
}

int ol_dist_bcast_f32(float *buf, int64_t n, int32_t root) {
    if (ol_dist_size() == 1) return 0;
    char *p = (char *)buf;
    while (n > 0) {
        int cnt = n > INT_MAX / 2 ? INT_MAX / 2 : (int)n;
        int rc = MPI_Bcast(p, cnt, MPI_FLOAT, root, comm());
        if (rc != MPI_SUCCESS) return mpi_fail("dist_bcast_f32", rc);
        p += (int64_t)cnt * 4;
        n -= cnt;
    }
    return 0;
}

/* Broadcast parameters (and AdamW state) from root so every rank starts identical. */
int ol_dist_bcast_params(ol_ctx *c, int32_t root) {
    if (!c) OL_FAIL_INT("dist_bcast_params: NULL context");
    if (ol_dist_bcast_f32(c->params, c->param_used, root)) return -1;
    if (ol_dist_bcast_f32(c->adam_m, c->param_used, root)) return -1;
    return ol_dist_bcast_f32(c->adam_v, c->param_used, root);
}

/* FNV-1a over the bytes of the flat parameter buffer. */
uint64_t ol_params_checksum(ol_ctx *c) {
    const unsigned char *p = (const unsigned char *)c->params;
    uint64_t h = 1469598103934665603ULL;
    for (int64_t i = 0; i < c->param_used * 4; i++) { h ^= p[i]; h *= 1099511628211ULL; }
    return h;
}

/* Every rank computes the checksum; an error names the ranks that differ from rank 0. */
int ol_dist_check_params(ol_ctx *c) {
    if (!c) OL_FAIL_INT("dist_check_params: NULL context");
    int n = ol_dist_size();
    if (n == 1) return 0;
    uint64_t mine = ol_params_checksum(c);
    uint64_t all[1024];
    uint64_t *buf = n <= 1024 ? all : malloc((size_t)n * 8);
    if (!buf) OL_FAIL_INT("dist_check_params: out of memory");
    int rc = MPI_Allgather(&mine, 1, MPI_UINT64_T, buf, 1, MPI_UINT64_T, comm());
    if (rc != MPI_SUCCESS) { if (buf != all) free(buf); return mpi_fail("dist_check_params", rc); }
    int bad = -1;
    for (int r = 1; r < n && bad < 0; r++) if (buf[r] != buf[0]) bad = r;
    uint64_t b0 = buf[0], bb = bad >= 0 ? buf[bad] : 0;
    if (buf != all) free(buf);
    if (bad >= 0)
        OL_FAIL_INT("dist_check_params: parameters differ across ranks: rank 0 checksum %016llx, rank %d %016llx",
                    (unsigned long long)b0, bad, (unsigned long long)bb);
    return 0;
}

void ol_dist_barrier(void) { if (active()) MPI_Barrier(comm()); }

/* A barrier that waits asleep: MPI_Ibarrier, then MPI_Test every poll_ms milliseconds.
 * Open MPI's blocking collectives poll at 100 % of a core; a rank whose sweep members are
 * done can wait many minutes for the others, taking a core that their threads (or another
 * job) could use. The collective that follows then finds every rank there. */
int ol_dist_quiet_barrier(int32_t poll_ms) {
    if (poll_ms < 1 || poll_ms > 10000) OL_FAIL_INT("dist_quiet_barrier: poll_ms %d must be in 1..10000", poll_ms);
    if (!active() || ol_dist_size() == 1) return 0;
    MPI_Request req;
    int rc = MPI_Ibarrier(comm(), &req);
    if (rc != MPI_SUCCESS) return mpi_fail("dist_quiet_barrier", rc);
    struct timespec ts = { poll_ms / 1000, (long)(poll_ms % 1000) * 1000000L };
    for (;;) {
        int done = 0;
        rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail("dist_quiet_barrier", rc);
        if (done) return 0;
        nanosleep(&ts, NULL);
    }
}
double ol_dist_wtime(void) {
    if (active()) return MPI_Wtime();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Stop every rank of the job (after the caller printed its message). */
void ol_dist_abort(int32_t code) {
    if (active() && ol_dist_world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

/* ---- checkpoint-before-timeout: Slurm's --signal sends e.g. SIGUSR1 some minutes before the
 * time limit; the handler only sets a flag that the training loop polls between steps. */
static volatile sig_atomic_t g_signal_seen = 0;
static void on_signal(int sig) { g_signal_seen = sig; }

int ol_signal_watch(int32_t signum) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(signum, &sa, NULL) != 0) OL_FAIL_INT("signal_watch: cannot watch signal %d", signum);
    return 0;
}

int32_t ol_signal_pending(void) { return (int32_t)g_signal_seen; }
void ol_signal_clear(void) { g_signal_seen = 0; }

/* The signal seen on any rank (max over ranks), so every rank stops at the same step. */
int32_t ol_dist_signal_pending(void) {
    int64_t s = g_signal_seen;
    if (ol_dist_size() > 1 && ol_dist_allreduce_i64(&s, 1, 1) != 0) return -1;
    return (int32_t)s;
}
