/*
 * io_netcdf.c — a small NetCDF-4 writer for result files (one file per experiment run).
 *
 * The results layer (lua/outlierlab/figure/netcdf.lua) collects dimensions, variables and
 * attributes, then writes them in one go through this API:
 *
 *     ol_nc *f = ol_nc_create("results/x/x.nc");          // writes "results/x/x.nc.tmp.<pid>"
 *     int d = ol_nc_def_dim(f, "layer", 4);               // -> dim id
 *     int v = ol_nc_def_var(f, "count", OL_NC_INT, 1, &d); // -> var id (deflate level 4 + shuffle)
 *     ol_nc_put_att_text(f, v, "long_name", "6 sigma outlier count");
 *     ol_nc_put_att_text(f, OL_NC_GLOBAL, "title", "...");  // global attributes: varid -1
 *     ol_nc_enddef(f);
 *     ol_nc_put_int(f, v, data);                          // the whole variable at once
 *     ol_nc_close(f);                                     // nc_close, then rename to the final name
 *
 * The file appears under its final name only after nc_close succeeded (atomic rename), so a
 * run killed mid-write never leaves a truncated result. ol_nc_abort closes and deletes the
 * temporary file. NetCDF-C here is serial: only MPI rank 0 writes.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"
#include <netcdf.h>
#include <stdlib.h>
#include <unistd.h>

struct ol_nc {
    int  ncid;
    int  open;
    char path[4096];
    char tmp[4160];
};

#define NC_CHECK(call, what)                                                                  \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_ != NC_NOERR) {                                                                \
            ol__set_error("netcdf %s (%s): %s", what, f->path, nc_strerror(rc_));            \
            return -1;                                                                        \
        }                                                                                     \
    } while (0)

static int check_file(const ol_nc *f, const char *op) {
    if (!f) { ol__set_error("%s: file handle is NULL", op); return -1; }
    if (!f->open) { ol__set_error("%s: %s is already closed", op, f->path); return -1; }
    return 0;
}

ol_nc *ol_nc_create(const char *path) {
    if (!path || !*path) OL_FAIL("ol_nc_create: empty path");
    if (strlen(path) >= 4096) OL_FAIL("ol_nc_create: path too long (%zu bytes)", strlen(path));
    ol_nc *f = calloc(1, sizeof *f);
    if (!f) OL_FAIL("ol_nc_create: out of memory");
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->tmp, sizeof f->tmp, "%s.tmp.%ld", path, (long)getpid());
    int rc = nc_create(f->tmp, NC_CLOBBER | NC_NETCDF4, &f->ncid);
    if (rc != NC_NOERR) {
        ol__set_error("ol_nc_create: cannot create %s: %s", f->tmp, nc_strerror(rc));
        free(f);
        return NULL;
    }
    f->open = 1;
    return f;
}

int ol_nc_def_dim(ol_nc *f, const char *name, int64_t len) {
    if (check_file(f, "ol_nc_def_dim")) return -1;
    if (!name || !*name) OL_FAIL_INT("ol_nc_def_dim (%s): empty dimension name", f->path);
    if (len < 1) OL_FAIL_INT("ol_nc_def_dim (%s): dimension '%s' has length %lld (must be >= 1)",
                             f->path, name, (long long)len);
    int id = -1;
    int rc = nc_def_dim(f->ncid, name, (size_t)len, &id);
    if (rc != NC_NOERR)
        OL_FAIL_INT("ol_nc_def_dim (%s): dimension '%s': %s", f->path, name, nc_strerror(rc));
    return id;
}

int ol_nc_def_var(ol_nc *f, const char *name, int32_t type, int32_t ndims, const int32_t *dimids) {
    if (check_file(f, "ol_nc_def_var")) return -1;
    if (!name || !*name) OL_FAIL_INT("ol_nc_def_var (%s): empty variable name", f->path);
    if (ndims < 0 || ndims > 8 || (ndims > 0 && !dimids))
        OL_FAIL_INT("ol_nc_def_var (%s): variable '%s': bad rank %d", f->path, name, ndims);
    nc_type t;
    switch (type) {
    case OL_NC_FLOAT:  t = NC_FLOAT; break;
    case OL_NC_DOUBLE: t = NC_DOUBLE; break;
    case OL_NC_INT:    t = NC_INT; break;
    default: OL_FAIL_INT("ol_nc_def_var (%s): variable '%s': unknown type %d", f->path, name, type);
    }
    int dims[8] = { 0 }, id = -1;
    for (int i = 0; i < ndims; i++) dims[i] = dimids[i];
    int rc = nc_def_var(f->ncid, name, t, ndims, dims, &id);
    if (rc != NC_NOERR)
        OL_FAIL_INT("ol_nc_def_var (%s): variable '%s': %s", f->path, name, nc_strerror(rc));
    if (ndims > 0) {   /* deflate level 4 with byte shuffle; scalars cannot be chunked */
        rc = nc_def_var_deflate(f->ncid, id, 1, 1, 4);
        if (rc != NC_NOERR)
            OL_FAIL_INT("ol_nc_def_var (%s): deflate on '%s': %s", f->path, name, nc_strerror(rc));
    }
    return id;
}

static int att_target(const ol_nc *f, int32_t varid) { (void)f; return varid < 0 ? NC_GLOBAL : varid; }

int ol_nc_put_att_text(ol_nc *f, int32_t varid, const char *name, const char *value) {
    if (check_file(f, "ol_nc_put_att_text")) return -1;
    if (!name || !*name || !value) OL_FAIL_INT("ol_nc_put_att_text (%s): empty name or NULL value", f->path);
    NC_CHECK(nc_put_att_text(f->ncid, att_target(f, varid), name, strlen(value), value), name);
    return 0;
}

int ol_nc_put_att_double(ol_nc *f, int32_t varid, const char *name, double value) {
    if (check_file(f, "ol_nc_put_att_double")) return -1;
    if (!name || !*name) OL_FAIL_INT("ol_nc_put_att_double (%s): empty name", f->path);
    NC_CHECK(nc_put_att_double(f->ncid, att_target(f, varid), name, NC_DOUBLE, 1, &value), name);
    return 0;
}

int ol_nc_put_att_int(ol_nc *f, int32_t varid, const char *name, int32_t value) {
    if (check_file(f, "ol_nc_put_att_int")) return -1;
    if (!name || !*name) OL_FAIL_INT("ol_nc_put_att_int (%s): empty name", f->path);
    int v = value;
    NC_CHECK(nc_put_att_int(f->ncid, att_target(f, varid), name, NC_INT, 1, &v), name);
    return 0;
}

int ol_nc_put_att_int_array(ol_nc *f, int32_t varid, const char *name, int64_t n, const int32_t *values) {
    if (check_file(f, "ol_nc_put_att_int_array")) return -1;
    if (!name || !*name || n < 1 || !values)
        OL_FAIL_INT("ol_nc_put_att_int_array (%s): empty name, no values or NULL (%s)", f->path, name ? name : "?");
    NC_CHECK(nc_put_att_int(f->ncid, att_target(f, varid), name, NC_INT, (size_t)n, values), name);
    return 0;
}

int ol_nc_enddef(ol_nc *f) {
    if (check_file(f, "ol_nc_enddef")) return -1;
    NC_CHECK(nc_enddef(f->ncid), "enddef");
    return 0;
}

int ol_nc_put_float(ol_nc *f, int32_t varid, const float *data) {
    if (check_file(f, "ol_nc_put_float")) return -1;
    if (!data) OL_FAIL_INT("ol_nc_put_float (%s): NULL data for var %d", f->path, varid);
    NC_CHECK(nc_put_var_float(f->ncid, varid, data), "put float");
    return 0;
}

int ol_nc_put_double(ol_nc *f, int32_t varid, const double *data) {
    if (check_file(f, "ol_nc_put_double")) return -1;
    if (!data) OL_FAIL_INT("ol_nc_put_double (%s): NULL data for var %d", f->path, varid);
    NC_CHECK(nc_put_var_double(f->ncid, varid, data), "put double");
    return 0;
}

int ol_nc_put_int(ol_nc *f, int32_t varid, const int32_t *data) {
    if (check_file(f, "ol_nc_put_int")) return -1;
    if (!data) OL_FAIL_INT("ol_nc_put_int (%s): NULL data for var %d", f->path, varid);
    NC_CHECK(nc_put_var_int(f->ncid, varid, (const int *)data), "put int");
    return 0;
}

int ol_nc_close(ol_nc *f) {
    if (check_file(f, "ol_nc_close")) return -1;
    f->open = 0;
    int rc = nc_close(f->ncid);
    if (rc != NC_NOERR) {
        ol__set_error("ol_nc_close (%s): %s", f->path, nc_strerror(rc));
        unlink(f->tmp);
        free(f);
        return -1;
    }
    if (rename(f->tmp, f->path) != 0) {
        ol__set_error("ol_nc_close: cannot rename %s to %s", f->tmp, f->path);
        unlink(f->tmp);
        free(f);
        return -1;
    }
    free(f);
    return 0;
}

void ol_nc_abort(ol_nc *f) {
    if (!f) return;
    if (f->open) { nc_close(f->ncid); unlink(f->tmp); }
    free(f);
}
