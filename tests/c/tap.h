/*
 * tap.h — tiny Test Anything Protocol macros for the C tests (read by prove in make test).
 *
 *   #include "tap.h"
 *   int main(void) {
 *       ok(1 + 1 == 2, "arithmetic");
 *       is_int(f(), 3, "f() is 3");
 *       is_str(msg, "expected", "message");
 *       like(ol_error(), "(2,3)", "error names the shape");
 *       return tap_done();
 *   }
 * Each check prints "ok N - name" or "not ok N - name" plus a "# ..." diagnostic with the
 * values; tap_done() prints the plan "1..N" and returns non-zero if any check failed.
 */
#ifndef OL_TAP_H
#define OL_TAP_H
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <math.h>

static int tap_n = 0, tap_failed = 0;

static inline int tap_report(int cond, const char *name, const char *file, int line) {
    tap_n++;
    printf("%sok %d - %s\n", cond ? "" : "not ", tap_n, name);
    if (!cond) { tap_failed++; printf("# failed at %s:%d\n", file, line); }
    fflush(stdout);
    return cond;
}

#define ok(cond, name) tap_report(!!(cond), (name), __FILE__, __LINE__)

#define is_int(got, want, name) do { \
        long long g_ = (long long)(got), w_ = (long long)(want); \
        if (!tap_report(g_ == w_, (name), __FILE__, __LINE__)) printf("# got %lld, want %lld\n", g_, w_); \
    } while (0)

#define is_near(got, want, tol, name) do { \
        double g_ = (double)(got), w_ = (double)(want); \
        if (!tap_report(fabs(g_ - w_) <= (tol), (name), __FILE__, __LINE__)) \
            printf("# got %.9g, want %.9g (tol %g)\n", g_, w_, (double)(tol)); \
    } while (0)

#define is_str(got, want, name) do { \
        const char *g_ = (got), *w_ = (want); \
        if (!tap_report(g_ && w_ && strcmp(g_, w_) == 0, (name), __FILE__, __LINE__)) \
            printf("# got \"%s\", want \"%s\"\n", g_ ? g_ : "(null)", w_ ? w_ : "(null)"); \
    } while (0)

/* haystack contains needle */
#define like(got, needle, name) do { \
        const char *g_ = (got), *n_ = (needle); \
        if (!tap_report(g_ && strstr(g_, n_) != NULL, (name), __FILE__, __LINE__)) \
            printf("# \"%s\" does not contain \"%s\"\n", g_ ? g_ : "(null)", n_); \
    } while (0)

static inline void diag(const char *msg) { printf("# %s\n", msg); }

static inline int tap_done(void) {
    printf("1..%d\n", tap_n);
    fflush(stdout);
    return tap_failed ? 1 : 0;
}
#endif
