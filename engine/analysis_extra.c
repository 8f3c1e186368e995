/*
 * analysis_extra.c — numerical helpers for the 2024–2026 metrics (docs/reference/metrics.md): the
 * eigenvalues of a symmetric matrix (cyclic Jacobi in double), used for the matrix entropy of
 * token representations (Queipo-de-Llano et al. 2025).
 */
#include "internal.h"
#include <stdlib.h>

/* ev[0..n) = eigenvalues of the symmetric n×n matrix a (row-major, double; a is not modified),
 * by cyclic Jacobi rotations until the off-diagonal mass is below 1e-22 of the total (or 100
 * sweeps). Deterministic (one thread, fixed order). */
int ol_sym_eigvals(const double *a, int64_t n, double *ev) {
    if (!a || !ev || n < 1) OL_FAIL_INT("sym_eigvals: bad arguments (n = %lld)", (long long)n);
    double *A = malloc((size_t)(n * n) * 8);
    if (!A) OL_FAIL_INT("sym_eigvals: out of memory for n = %lld", (long long)n);
    memcpy(A, a, (size_t)(n * n) * 8);
    double total = 0;
    for (int64_t i = 0; i < n * n; i++) total += A[i] * A[i];
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int64_t i = 0; i < n; i++) for (int64_t j = i + 1; j < n; j++) off += A[i * n + j] * A[i * n + j];
        if (off <= 1e-22 * total || off == 0) break;
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) {
                double apq = A[p * n + q];
                if (fabs(apq) < 1e-300) continue;
                double th = (A[q * n + q] - A[p * n + p]) / (2 * apq);
                double t = (th >= 0 ? 1.0 : -1.0) / (fabs(th) + sqrt(th * th + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t k = 0; k < n; k++) {
                    double akp = A[k * n + p], akq = A[k * n + q];
                    A[k * n + p] = c * akp - s * akq;
                    A[k * n + q] = s * akp + c * akq;
                }
                for (int64_t k = 0; k < n; k++) {
                    double apk = A[p * n + k], aqk = A[q * n + k];
                    A[p * n + k] = c * apk - s * aqk;
                    A[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    for (int64_t i = 0; i < n; i++) ev[i] = A[i * n + i];
    free(A);
    return 0;
}
