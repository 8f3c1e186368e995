/*
 * pool.c — the engine's own worker threads for loops of independent work items (ol__par).
 *
 * Why not an OpenMP parallel loop: at its end the calling thread waits until every thread of
 * the team has arrived, also one that has not even started because the host gave its core to
 * another process. On the shared machine this engine runs on, a training step of the model
 * organism has ~150 such regions, and with other jobs running two threads were slower than one.
 * Here the caller takes items too, and when none is left to take it waits only for the items
 * other threads have started; a thread that wakes late finds nothing left and goes back to
 * sleep. The items are fixed by the loop (their results do not depend on which thread runs
 * them), so the numbers are the same with any thread count and any interleaving.
 *
 * Protocol: one job at a time (ol__par is called by one thread; a call from inside an item, or
 * inside an OpenMP parallel region, runs its items inline). The job state is one 64-bit word,
 * generation << 32 | next item, claimed by compare-and-swap, so a thread that read an old
 * generation cannot claim an item of a newer job; the job's descriptor sits in a ring slot that
 * is reused only after its job has finished. Idle workers sleep on a futex (no spinning: on a
 * shared node a spinning thread takes the core from whoever would use it).
 */
#define _GNU_SOURCE
#include "internal.h"
#include <pthread.h>
#include <stdatomic.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sched.h>
#include <omp.h>

#define RING 16
#define MAXW 63

typedef struct job {
    _Atomic(ol_item_fn) fn;
    _Atomic(void *) arg;
    _Atomic int64_t n;
    _Atomic int64_t done;
} job;

static job g_jobs[RING];
static _Atomic uint64_t g_state;      /* generation << 32 | next item */
static _Atomic int g_active;          /* threads that may take items: the caller and workers 1.. this − 1 */
static _Atomic uint32_t g_pub;        /* generation of the last published job (the futex word) */
static _Atomic int g_sleepers;
static int g_workers;                 /* started so far */
static pthread_mutex_t g_start = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int t_in_item;   /* inside an item: nested loops run inline */
static _Thread_local unsigned t_fp_gen = (unsigned)-1;   /* the flush-to-zero change last applied (core.c) */

static void futex_wait(_Atomic uint32_t *w, uint32_t v) {
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}
static void futex_wake(_Atomic uint32_t *w) {
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* claim and run items of the current job until none is left */
static void work(int tid) {
    for (;;) {
        uint64_t s = atomic_load_explicit(&g_state, memory_order_acquire);
        job *j = &g_jobs[(s >> 32) % RING];
        if ((int64_t)(uint32_t)s >= atomic_load_explicit(&j->n, memory_order_relaxed)) return;
        if (!atomic_compare_exchange_weak_explicit(&g_state, &s, s + 1, memory_order_acq_rel, memory_order_relaxed))
            continue;
        /* the job cannot finish (nor its slot be reused) before this item is done */
        ol_item_fn fn = atomic_load_explicit(&j->fn, memory_order_relaxed);
        /* the caller's flush-to-zero mode (core.c, "subnormals"): a change made before this job
         * was published is seen here (the acquire load of g_state above) */
        unsigned gen = atomic_load_explicit(&ol__fp_gen, memory_order_relaxed);
        if (gen != t_fp_gen) { ol__fp_apply(atomic_load_explicit(&ol__fp_flush, memory_order_relaxed)); t_fp_gen = gen; }
        t_in_item = 1;
        fn(atomic_load_explicit(&j->arg, memory_order_relaxed), (int64_t)(uint32_t)s, tid);
        t_in_item = 0;
        atomic_fetch_add_explicit(&j->done, 1, memory_order_release);
    }
}

static void *worker(void *p) {
    int tid = (int)(intptr_t)p;
    for (;;) {
        uint32_t pub = atomic_load(&g_pub);
        if (tid < atomic_load(&g_active)) work(tid);
        atomic_fetch_add(&g_sleepers, 1);
        while (atomic_load(&g_pub) == pub) futex_wait(&g_pub, pub);
        atomic_fetch_sub(&g_sleepers, 1);
    }
    return NULL;
}

/* at least n − 1 workers; returns how many there are */
static int workers(int n) {
    if (g_workers >= n - 1) return g_workers;
    pthread_mutex_lock(&g_start);
    while (g_workers < n - 1 && g_workers < MAXW) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&th, &at, worker, (void *)(intptr_t)(g_workers + 1));
        pthread_attr_destroy(&at);
        if (rc != 0) break;
        g_workers++;
    }
    pthread_mutex_unlock(&g_start);
    return g_workers;
}

void ol__par(int64_t n, ol_item_fn fn, void *arg) {
    if (n <= 0) return;
    int nt = ol_get_num_threads();
    if (nt <= 1 || n == 1 || n > UINT32_MAX || t_in_item || omp_in_parallel() || workers(nt) == 0) {
        for (int64_t i = 0; i < n; i++) fn(arg, i, 0);
        return;
    }
    atomic_store(&g_active, nt);
    uint32_t gen = (uint32_t)(atomic_load_explicit(&g_state, memory_order_relaxed) >> 32) + 1;
    job *j = &g_jobs[gen % RING];
    atomic_store_explicit(&j->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&j->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&j->n, n, memory_order_relaxed);
    atomic_store_explicit(&j->done, 0, memory_order_relaxed);
    atomic_store_explicit(&g_state, (uint64_t)gen << 32, memory_order_release);
    atomic_store(&g_pub, gen);
    if (atomic_load(&g_sleepers) > 0) futex_wake(&g_pub);
    work(0);
    /* every item is taken; wait for those other threads are still running */
    for (int spins = 0; atomic_load_explicit(&j->done, memory_order_acquire) < n; spins++) {
        if (spins >= 2000) sched_yield();
#if defined(__x86_64__)
        else __builtin_ia32_pause();
#endif
    }
}

/* ranges of one loop as ol__par items (ol__par_range) */
typedef struct { ol_range_fn fn; void *arg; int64_t n, grain; } range_job;
static void range_item(void *a, int64_t it, int tid) {
    const range_job *r = a;
    (void)tid;
    int64_t lo = it * r->grain, hi = lo + r->grain < r->n ? lo + r->grain : r->n;
    r->fn(r->arg, lo, hi);
}

void ol__par_range(int64_t n, int64_t grain, int par, ol_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t items = (n + grain - 1) / grain;
    if (!par || items < 2) { fn(arg, 0, n); return; }
    range_job r = { fn, arg, n, grain };
    ol__par(items, range_item, &r);
}
