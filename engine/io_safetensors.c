/*
 * io_safetensors.c — reader and writer of the safetensors format (Hugging Face), the
 * checkpoint format of outlierlab, so that other tools (safetensors, numpy) read our files
 * and we read theirs.
 *
 * Layout (https://huggingface.co/docs/safetensors, "Format"):
 *   bytes [0, 8)        N, unsigned 64-bit little-endian: the header length
 *   bytes [8, 8+N)      UTF-8 JSON object: {"name": {"dtype": "F32", "shape": [2,3],
 *                       "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
 *                       (we pad it with spaces to a multiple of 8 so the data is aligned)
 *   bytes [8+N, EOF)    the data area: every tensor's raw little-endian bytes at
 *                       [begin, end) relative to 8+N; together they cover the area exactly.
 * The reader checks all of it (header length vs file size, JSON, dtype, shape·itemsize =
 * end-begin, offsets inside the area, no overlap and no gap) and names the file and the
 * problem in every error. It is stricter than cJSON where the format is: after the object
 * only spaces; strings valid UTF-8 with no control character or NUL; no key twice in an
 * object; numbers non-negative integers written as digits (4.0 is not an offset). The writer is atomic: "<path>.tmp.<pid>", fsync, rename.
 * This machine is little-endian (x86-64), so data is written and read as is.
 */
#define _GNU_SOURCE
#include "internal.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_DIMS 8
/* the format's own limit on the header size (100 MB), guards against a garbage length */
#define ST_MAX_HEADER (100LL * 1000 * 1000)

static const struct { const char *name; int size; } st_types[] = {
    [OL_ST_F32] = {"F32", 4},   [OL_ST_F16] = {"F16", 2},   [OL_ST_BF16] = {"BF16", 2},
    [OL_ST_F64] = {"F64", 8},   [OL_ST_I32] = {"I32", 4},   [OL_ST_I64] = {"I64", 8},
    [OL_ST_I16] = {"I16", 2},   [OL_ST_I8] = {"I8", 1},     [OL_ST_U8] = {"U8", 1},
    [OL_ST_U16] = {"U16", 2},   [OL_ST_U32] = {"U32", 4},   [OL_ST_U64] = {"U64", 8},
    [OL_ST_BOOL] = {"BOOL", 1}, [OL_ST_F8_E4M3] = {"F8_E4M3", 1}, [OL_ST_F8_E5M2] = {"F8_E5M2", 1},
};
#define ST_NTYPES ((int)(sizeof st_types / sizeof st_types[0]))

const char *ol_st_dtype_name(int32_t dt) {
    return dt >= 0 && dt < ST_NTYPES ? st_types[dt].name : "?";
}
static int st_dtype_from_name(const char *s) {
    for (int i = 0; i < ST_NTYPES; i++) if (strcmp(st_types[i].name, s) == 0) return i;
    return -1;
}

/* ================================================================== writer */

typedef struct st_entry {
    char   *name;
    int32_t dtype, ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t nbytes;
    const void *data;
} st_entry;

struct ol_st_writer {
    st_entry *e;
    int32_t   n, cap;
    cJSON    *meta;     /* object of strings */
};

ol_st_writer *ol_st_writer_new(void) {
    ol_st_writer *w = calloc(1, sizeof *w);
    if (!w) OL_FAIL("safetensors writer: out of memory");
    w->meta = cJSON_CreateObject();
    if (!w->meta) { free(w); OL_FAIL("safetensors writer: out of memory"); }
    return w;
}

void ol_st_writer_free(ol_st_writer *w) {
    if (!w) return;
    for (int32_t i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    cJSON_Delete(w->meta);
    free(w);
}

int ol_st_writer_add(ol_st_writer *w, const char *name, int32_t dtype, int32_t ndim,
                     const int64_t *shape, const void *data) {
    if (!w || !name) OL_FAIL_INT("safetensors writer: NULL writer or name");
    if (!*name || strcmp(name, "__metadata__") == 0)
        OL_FAIL_INT("safetensors writer: invalid tensor name '%s'", name);
    if (dtype < 0 || dtype >= ST_NTYPES) OL_FAIL_INT("safetensors writer: tensor '%s': unknown dtype %d", name, dtype);
    if (ndim < 0 || ndim > ST_MAX_DIMS) OL_FAIL_INT("safetensors writer: tensor '%s': %d dims (0..8 allowed)", name, ndim);
    for (int32_t i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0) OL_FAIL_INT("safetensors writer: tensor '%s' added twice", name);
    int64_t numel = 1;
    for (int32_t d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && numel > INT64_MAX / 8 / shape[d]))
            OL_FAIL_INT("safetensors writer: tensor '%s': bad dim %d = %lld", name, d, (long long)shape[d]);
        numel *= shape[d];
    }
    if (numel > 0 && !data) OL_FAIL_INT("safetensors writer: tensor '%s': NULL data", name);
    if (w->n == w->cap) {
        int32_t cap = w->cap ? 2 * w->cap : 64;
        st_entry *e = realloc(w->e, (size_t)cap * sizeof *e);
        if (!e) OL_FAIL_INT("safetensors writer: out of memory");
        w->e = e; w->cap = cap;
    }
    st_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name) OL_FAIL_INT("safetensors writer: out of memory");
    e->dtype = dtype; e->ndim = ndim;
    for (int32_t d = 0; d < ndim; d++) e->shape[d] = shape[d];
    e->nbytes = numel * st_types[dtype].size;
    e->data = data;
    w->n++;
    return 0;
}

int ol_st_writer_set_metadata(ol_st_writer *w, const char *key, const char *value) {
    if (!w || !key || !value) OL_FAIL_INT("safetensors writer: NULL metadata key or value");
    cJSON *s = cJSON_CreateString(value);
    if (!s) OL_FAIL_INT("safetensors writer: out of memory");
    if (cJSON_GetObjectItemCaseSensitive(w->meta, key)) cJSON_ReplaceItemInObjectCaseSensitive(w->meta, key, s);
    else cJSON_AddItemToObject(w->meta, key, s);
    return 0;
}

static int write_all(int fd, const void *buf, int64_t n) {
    const char *p = buf;
    while (n > 0) {
        size_t chunk = n > (1 << 30) ? (1 << 30) : (size_t)n;
        ssize_t k = write(fd, p, chunk);
        if (k < 0) { if (errno == EINTR) continue; return -1; }
        p += k; n -= k;
    }
    return 0;
}

/* fsync the directory holding path, so the rename itself is durable */
static void fsync_dir(const char *path) {
    char *copy = strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) { fsync(fd); close(fd); }
    free(copy);
}

int ol_st_writer_save(ol_st_writer *w, const char *path) {
    if (!w || !path) OL_FAIL_INT("safetensors writer: NULL writer or path");
    /* header: tensors in the order added, offsets back to back, then __metadata__ */
    cJSON *h = cJSON_CreateObject();
    if (!h) OL_FAIL_INT("safetensors: %s: out of memory", path);
    int64_t off = 0;
    for (int32_t i = 0; i < w->n; i++) {
        st_entry *e = &w->e[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "dtype", st_types[e->dtype].name);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int32_t d = 0; d < e->ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)e->shape[d]));
        cJSON *of = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + e->nbytes)));
        cJSON_AddItemToObject(h, e->name, o);
        off += e->nbytes;
    }
    if (off > (1LL << 53)) { cJSON_Delete(h); OL_FAIL_INT("safetensors: %s: data too large for JSON offsets", path); }
    if (cJSON_GetArraySize(w->meta) > 0)
        cJSON_AddItemReferenceToObject(h, "__metadata__", w->meta);
    char *json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!json) OL_FAIL_INT("safetensors: %s: cannot print the JSON header", path);
    int64_t jl = (int64_t)strlen(json);
    int64_t hl = (jl + 7) & ~(int64_t)7;     /* pad with spaces to a multiple of 8 */
    char *hdr = malloc((size_t)hl + 8);
    if (!hdr) { free(json); OL_FAIL_INT("safetensors: %s: out of memory", path); }
    uint64_t hl64 = (uint64_t)hl;
    for (int b = 0; b < 8; b++) hdr[b] = (char)((hl64 >> (8 * b)) & 0xff);
    memcpy(hdr + 8, json, (size_t)jl);
    memset(hdr + 8 + jl, ' ', (size_t)(hl - jl));
    free(json);

    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        free(hdr); OL_FAIL_INT("safetensors: path too long: %s", path);
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { free(hdr); OL_FAIL_INT("safetensors: cannot create %s: %s", tmp, strerror(errno)); }
    int rc = write_all(fd, hdr, hl + 8);
    free(hdr);
    for (int32_t i = 0; rc == 0 && i < w->n; i++) rc = write_all(fd, w->e[i].data, w->e[i].nbytes);
    if (rc == 0 && fsync(fd) != 0) rc = -1;
    int err = errno;
    if (close(fd) != 0 && rc == 0) { rc = -1; err = errno; }
    if (rc != 0) { unlink(tmp); OL_FAIL_INT("safetensors: writing %s failed: %s", tmp, strerror(err)); }
    if (rename(tmp, path) != 0) {
        err = errno; unlink(tmp);
        OL_FAIL_INT("safetensors: cannot rename %s to %s: %s", tmp, path, strerror(err));
    }
    fsync_dir(path);
    return 0;
}

/* ================================================================== reader */

typedef struct st_tensor {
    char   *name;
    int32_t dtype, ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel, begin, end;    /* offsets relative to the data area */
} st_tensor;

struct ol_st_file {
    char   *path;
    unsigned char *map;
    int64_t size, data_start;
    st_tensor *t;
    int32_t n;
    char  **mkeys, **mvals;
    int32_t nmeta;
};

void ol_st_close(ol_st_file *f) {
    if (!f) return;
    if (f->map && f->size > 0) munmap(f->map, (size_t)f->size);
    for (int32_t i = 0; i < f->n; i++) free(f->t[i].name);
    for (int32_t i = 0; i < f->nmeta; i++) { free(f->mkeys[i]); free(f->mvals[i]); }
    free(f->mkeys); free(f->mvals);
    free(f->t); free(f->path); free(f);
}

static int cmp_begin(const void *a, const void *b) {
    const st_tensor *x = *(st_tensor *const *)a, *y = *(st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* a JSON number that is a non-negative integer below 2^53 */
static int json_uint(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(int64_t)d) return 0;
    *out = (int64_t)d;
    return 1;
}

#define ST_BAD(...) do { ol__set_error(__VA_ARGS__); goto fail; } while (0)

/* The string that starts at p[at] (its opening quote), printable, for messages: at most 40
 * bytes, anything outside printable ASCII as \xNN. */
static const char *st_excerpt(const unsigned char *p, int64_t n, int64_t at, char *buf) {
    int k = 0;
    for (int64_t i = at + 1; i < n && p[i] != '"' && i < at + 41; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\') buf[k++] = (char)p[i];
        else k += sprintf(buf + k, "\\x%02X", p[i]);
    }
    buf[k] = 0;
    return buf;
}

/* Length of the valid UTF-8 sequence at p[0..n) (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), 0 if it is not valid. */
static int st_utf8_len(const unsigned char *p, int64_t n) {
    unsigned c = p[0];
    int k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) k = 1;
    else if (c >= 0xE0 && c <= 0xEF) { k = 2; if (c == 0xE0) lo = 0xA0; else if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 3; if (c == 0xF0) lo = 0x90; else if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (n <= k) return 0;
    for (int j = 1; j <= k; j++) {
        if (p[j] < (j == 1 ? lo : 0x80) || p[j] > (j == 1 ? hi : 0xBF)) return 0;
    }
    return k + 1;
}

static int st_hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        v = v * 16 + d;
    }
    *out = v;
    return 1;
}

/* What cJSON accepts and the format does not, checked on the header's text p[0..n) (the
 * JSON value cJSON parsed): every string valid UTF-8 without control characters or a NUL
 * (raw or \u0000) and with paired surrogate escapes; every number a non-negative integer
 * written as digits (shape and data_offsets are the only numbers of the format). Returns 0,
 * or -1 with the error set. */
static int st_check_text(const char *path, const unsigned char *p, int64_t n) {
    char ex[200];
    for (int64_t i = 0; i < n; ) {
        unsigned c = p[i];
        if (c == '"') {
            int64_t s = i++;
            for (;;) {
                if (i >= n) return 0;              /* unterminated: cJSON has said so */
                c = p[i];
                if (c == '"') { i++; break; }
                if (c < 0x20)
                    OL_FAIL_INT("safetensors: %s: control character 0x%02X at header byte %lld inside the string \"%s\" "
                                "(names and metadata must be plain UTF-8 text without raw control characters or NUL)",
                                path, c, (long long)i, st_excerpt(p, n, s, ex));
                if (c == '\\') {
                    if (i + 1 < n && p[i + 1] == 'u') {
                        unsigned u, u2;
                        if (i + 6 > n || !st_hex4(p + i + 2, &u)) return 0;   /* cJSON's error */
                        if (u == 0)
                            OL_FAIL_INT("safetensors: %s: \\u0000 (NUL) at header byte %lld inside the string \"%s\" (a name with a NUL would be cut short)",
                                        path, (long long)i, st_excerpt(p, n, s, ex));
                        if (u >= 0xDC00 && u <= 0xDFFF)
                            OL_FAIL_INT("safetensors: %s: lone low surrogate \\u%04X at header byte %lld inside the string \"%s\" (not UTF-16, so not valid UTF-8)",
                                        path, u, (long long)i, st_excerpt(p, n, s, ex));
                        if (u >= 0xD800 && u <= 0xDBFF) {
                            if (!(i + 12 <= n && p[i + 6] == '\\' && p[i + 7] == 'u' && st_hex4(p + i + 8, &u2) &&
                                  u2 >= 0xDC00 && u2 <= 0xDFFF))
                                OL_FAIL_INT("safetensors: %s: unpaired high surrogate \\u%04X at header byte %lld inside the string \"%s\"",
                                            path, u, (long long)i, st_excerpt(p, n, s, ex));
                            i += 12;
                        } else i += 6;
                    } else i += 2;
                    continue;
                }
                int k = st_utf8_len(p + i, n - i);
                if (k == 0)
                    OL_FAIL_INT("safetensors: %s: invalid UTF-8 (byte 0x%02X) at header byte %lld inside the string \"%s\" (names and metadata must be UTF-8)",
                                path, c, (long long)i, st_excerpt(p, n, s, ex));
                i += k;
            }
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            int64_t s = i;
            while (i < n && (p[i] == '-' || p[i] == '+' || p[i] == '.' || p[i] == 'e' || p[i] == 'E' ||
                             (p[i] >= '0' && p[i] <= '9'))) i++;
            int digits = 1;
            for (int64_t j = s; j < i; j++) digits &= p[j] >= '0' && p[j] <= '9';
            if (!digits || (p[s] == '0' && i - s > 1))
                OL_FAIL_INT("safetensors: %s: the number %.*s at header byte %lld is not a non-negative integer written as digits "
                            "(shape and data_offsets hold integers only)", path, (int)(i - s > 40 ? 40 : i - s), (const char *)p + s, (long long)s);
        } else i++;
    }
    return 0;
}

static int st_cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The first key that appears twice in an object of the tree under v (keys compared after
 * sorting), or NULL. JSON parsers disagree on duplicates (first or last wins), so the
 * format has none. */
static const char *st_dup_key(const cJSON *v, const char **where) {
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return NULL;
    int n = 0;
    const cJSON *c;
    for (c = v->child; c; c = c->next) {
        const char *d = st_dup_key(c, where);
        if (d) return d;
        n++;
    }
    if (!cJSON_IsObject(v) || n < 2) return NULL;
    const char **keys = malloc((size_t)n * sizeof *keys);
    if (!keys) return NULL;
    int k = 0;
    for (c = v->child; c; c = c->next) keys[k++] = c->string ? c->string : "";
    qsort(keys, (size_t)n, sizeof *keys, st_cmp_str);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++) if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
    free(keys);
    if (dup) *where = v->string;
    return dup;
}

ol_st_file *ol_st_open(const char *path) {
    if (!path) OL_FAIL("safetensors: NULL path");
    ol_st_file *f = calloc(1, sizeof *f);
    cJSON *h = NULL;
    st_tensor **order = NULL;
    if (!f || !(f->path = strdup(path))) { free(f); OL_FAIL("safetensors: out of memory"); }
    int fd = open(path, O_RDONLY);
    if (fd < 0) ST_BAD("safetensors: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); ST_BAD("safetensors: cannot stat %s: %s", path, strerror(e)); }
    f->size = (int64_t)st.st_size;
    if (f->size < 8) { close(fd); ST_BAD("safetensors: %s is truncated: %lld bytes, less than the 8-byte header length", path, (long long)f->size); }
    f->map = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) { f->map = NULL; ST_BAD("safetensors: cannot map %s: %s", path, strerror(errno)); }

    uint64_t hl = 0;
    for (int b = 7; b >= 0; b--) hl = (hl << 8) | f->map[b];
    if (hl > (uint64_t)ST_MAX_HEADER)
        ST_BAD("safetensors: %s: corrupted header length %llu (the format allows at most 100 MB)", path, (unsigned long long)hl);
    if ((int64_t)hl > f->size - 8)
        ST_BAD("safetensors: %s is truncated or has a corrupted header length: header says %llu bytes of JSON, the file has %lld after the length",
               path, (unsigned long long)hl, (long long)(f->size - 8));
    if (hl < 2 || f->map[8] != '{')
        ST_BAD("safetensors: %s: bad JSON header: it does not start with '{' (corrupted header length?)", path);
    f->data_start = 8 + (int64_t)hl;
    const int64_t data_size = f->size - f->data_start;

    const char *hdr = (const char *)f->map + 8, *end = NULL;
    h = cJSON_ParseWithLengthOpts(hdr, (size_t)hl, &end, 0);
    if (!h) {
        const char *ep = cJSON_GetErrorPtr();
        long at = ep ? (long)(ep - hdr) : -1;
        ST_BAD("safetensors: %s: bad JSON header (parse error near byte %ld of %llu)", path, at, (unsigned long long)hl);
    }
    if (!cJSON_IsObject(h)) ST_BAD("safetensors: %s: bad JSON header: not an object", path);
    /* after the object: spaces only, up to the header length */
    for (int64_t i = end - hdr; i < (int64_t)hl; i++)
        if (hdr[i] != ' ')
            ST_BAD("safetensors: %s: byte 0x%02X at header byte %lld after the JSON object (which ends at byte %lld of %llu): "
                   "the header may be padded with spaces only (trailing garbage or NUL padding?)",
                   path, (unsigned char)hdr[i], (long long)i, (long long)(end - hdr), (unsigned long long)hl);
    if (st_check_text(path, (const unsigned char *)hdr, end - hdr) != 0) goto fail;
    {
        const char *where = NULL, *dup = st_dup_key(h, &where);
        if (dup) ST_BAD("safetensors: %s: key '%s' appears twice in %s%s%s (the format has no duplicate keys)", path, dup,
                        where ? "the object '" : "the header", where ? where : "", where ? "'" : "");
    }

    int32_t cnt = cJSON_GetArraySize(h);
    f->t = calloc((size_t)(cnt > 0 ? cnt : 1), sizeof *f->t);
    order = calloc((size_t)(cnt > 0 ? cnt : 1), sizeof *order);
    if (!f->t || !order) ST_BAD("safetensors: %s: out of memory", path);
    const cJSON *it;
    cJSON_ArrayForEach(it, h) {
        const char *name = it->string;
        if (strcmp(name, "__metadata__") == 0) {
            if (!cJSON_IsObject(it)) ST_BAD("safetensors: %s: __metadata__ is not an object", path);
            int32_t m = cJSON_GetArraySize(it);
            f->mkeys = calloc((size_t)(m ? m : 1), sizeof(char *));
            f->mvals = calloc((size_t)(m ? m : 1), sizeof(char *));
            if (!f->mkeys || !f->mvals) ST_BAD("safetensors: %s: out of memory", path);
            const cJSON *kv;
            cJSON_ArrayForEach(kv, it) {
                if (!cJSON_IsString(kv)) ST_BAD("safetensors: %s: __metadata__ value of '%s' is not a string", path, kv->string);
                f->mkeys[f->nmeta] = strdup(kv->string);
                f->mvals[f->nmeta] = strdup(kv->valuestring);
                f->nmeta++;
                if (!f->mkeys[f->nmeta - 1] || !f->mvals[f->nmeta - 1]) ST_BAD("safetensors: %s: out of memory", path);
            }
            continue;
        }
        for (int32_t j = 0; j < f->n; j++)
            if (strcmp(f->t[j].name, name) == 0) ST_BAD("safetensors: %s: tensor '%s' appears twice", path, name);
        st_tensor *t = &f->t[f->n];
        if (!(t->name = strdup(name))) ST_BAD("safetensors: %s: out of memory", path);
        f->n++;
        if (!*name) ST_BAD("safetensors: %s: a tensor has an empty name", path);
        if (!cJSON_IsObject(it)) ST_BAD("safetensors: %s: tensor '%s': entry is not an object", path, name);
        const cJSON *key;
        cJSON_ArrayForEach(key, it)
            if (strcmp(key->string, "dtype") && strcmp(key->string, "shape") && strcmp(key->string, "data_offsets"))
                ST_BAD("safetensors: %s: tensor '%s': unknown key '%s' (an entry has dtype, shape and data_offsets only)",
                       path, name, key->string);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
        const cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsString(dt)) ST_BAD("safetensors: %s: tensor '%s': missing or non-string dtype", path, name);
        if ((t->dtype = st_dtype_from_name(dt->valuestring)) < 0)
            ST_BAD("safetensors: %s: tensor '%s': unknown dtype '%s'", path, name, dt->valuestring);
        if (!cJSON_IsArray(sh)) ST_BAD("safetensors: %s: tensor '%s': missing shape", path, name);
        t->ndim = cJSON_GetArraySize(sh);
        if (t->ndim > ST_MAX_DIMS) ST_BAD("safetensors: %s: tensor '%s': %d dims (at most %d supported)", path, name, t->ndim, ST_MAX_DIMS);
        t->numel = 1;
        int d = 0;
        const cJSON *dv;
        cJSON_ArrayForEach(dv, sh) {
            if (!json_uint(dv, &t->shape[d])) ST_BAD("safetensors: %s: tensor '%s': shape dim %d is not a non-negative integer", path, name, d);
            if (t->shape[d] > 0 && t->numel > (INT64_MAX / 8) / t->shape[d])
                ST_BAD("safetensors: %s: tensor '%s': shape overflows", path, name);
            t->numel *= t->shape[d];
            d++;
        }
        if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 ||
            !json_uint(cJSON_GetArrayItem(of, 0), &t->begin) || !json_uint(cJSON_GetArrayItem(of, 1), &t->end))
            ST_BAD("safetensors: %s: tensor '%s': data_offsets must be [begin, end] integers", path, name);
        if (t->end < t->begin) ST_BAD("safetensors: %s: tensor '%s': data_offsets end %lld < begin %lld", path, name, (long long)t->end, (long long)t->begin);
        if (t->end > data_size)
            ST_BAD("safetensors: %s: tensor '%s': offset past end of file (data_offsets end %lld, data area is %lld bytes; truncated file?)",
                   path, name, (long long)t->end, (long long)data_size);
        if (t->end - t->begin != t->numel * st_types[t->dtype].size)
            ST_BAD("safetensors: %s: tensor '%s': shape/offset mismatch: %lld elements of %s need %lld bytes, data_offsets span %lld",
                   path, name, (long long)t->numel, st_types[t->dtype].name,
                   (long long)(t->numel * st_types[t->dtype].size), (long long)(t->end - t->begin));
        order[f->n - 1] = t;
    }
    /* the tensors must tile the data area: sorted by offset, each starts where the last ended */
    qsort(order, (size_t)f->n, sizeof *order, cmp_begin);
    int64_t pos = 0;
    for (int32_t i = 0; i < f->n; i++) {
        if (order[i]->begin < pos)
            ST_BAD("safetensors: %s: tensor '%s' overlaps the previous tensor (begins at %lld, previous ends at %lld)",
                   path, order[i]->name, (long long)order[i]->begin, (long long)pos);
        if (order[i]->begin > pos)
            ST_BAD("safetensors: %s: gap in the data area before tensor '%s' (bytes %lld..%lld are not used)",
                   path, order[i]->name, (long long)pos, (long long)order[i]->begin);
        pos = order[i]->end;
    }
    if (pos != data_size)
        ST_BAD("safetensors: %s: the tensors cover %lld bytes but the data area has %lld (trailing garbage or corrupted header length)",
               path, (long long)pos, (long long)data_size);
    free(order);
    cJSON_Delete(h);
    return f;
fail:
    free(order);
    cJSON_Delete(h);
    ol_st_close(f);
    return NULL;
}

int32_t ol_st_count(const ol_st_file *f) { return f ? f->n : 0; }
const char *ol_st_name(const ol_st_file *f, int32_t i) { return f && i >= 0 && i < f->n ? f->t[i].name : NULL; }

int32_t ol_st_find(const ol_st_file *f, const char *name) {
    if (!f || !name) return -1;
    for (int32_t i = 0; i < f->n; i++) if (strcmp(f->t[i].name, name) == 0) return i;
    return -1;
}

int ol_st_info(const ol_st_file *f, int32_t i, int32_t *dtype, int32_t *ndim, int64_t *shape) {
    if (!f || i < 0 || i >= f->n) OL_FAIL_INT("safetensors: entry %d out of range", i);
    if (dtype) *dtype = f->t[i].dtype;
    if (ndim) *ndim = f->t[i].ndim;
    if (shape) for (int d = 0; d < f->t[i].ndim; d++) shape[d] = f->t[i].shape[d];
    return 0;
}

const char *ol_st_metadata(const ol_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int32_t i = 0; i < f->nmeta; i++) if (strcmp(f->mkeys[i], key) == 0) return f->mvals[i];
    return NULL;
}
int32_t ol_st_metadata_count(const ol_st_file *f) { return f ? f->nmeta : 0; }
const char *ol_st_metadata_key(const ol_st_file *f, int32_t i) { return f && i >= 0 && i < f->nmeta ? f->mkeys[i] : NULL; }

static const st_tensor *lookup(const ol_st_file *f, const char *name, int64_t numel) {
    if (!f || !name) OL_FAIL("safetensors: NULL file or name");
    int32_t i = ol_st_find(f, name);
    if (i < 0) OL_FAIL("safetensors: %s: missing tensor '%s'", f->path, name);
    const st_tensor *t = &f->t[i];
    if (t->numel != numel)
        OL_FAIL("safetensors: %s: tensor '%s' has %lld elements, the destination %lld", f->path, name,
                (long long)t->numel, (long long)numel);
    return t;
}

/* IEEE half -> float (exact: every half is a float) */
static float half_to_float(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        if (m == 0) bits = s;
        else {  /* subnormal: normalise */
            int k = -1;
            do { k++; m <<= 1; } while (!(m & 0x400));
            bits = s | ((uint32_t)(127 - 15 - k) << 23) | ((m & 0x3ff) << 13);
        }
    } else if (e == 31) bits = s | 0x7f800000u | (m << 13);
    else bits = s | ((e + 127 - 15) << 23) | (m << 13);
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

int ol_st_read_f32(const ol_st_file *f, const char *name, float *dst, int64_t numel) {
    const st_tensor *t = lookup(f, name, numel);
    if (!t) return -1;
    const unsigned char *src = f->map + f->data_start + t->begin;
    switch (t->dtype) {
    case OL_ST_F32: memcpy(dst, src, (size_t)numel * 4); break;
    case OL_ST_F64: for (int64_t i = 0; i < numel; i++) { double v; memcpy(&v, src + 8 * i, 8); dst[i] = (float)v; } break;
    case OL_ST_BF16:
        for (int64_t i = 0; i < numel; i++) {
            uint32_t bits = (uint32_t)(src[2 * i] | (src[2 * i + 1] << 8)) << 16;
            memcpy(&dst[i], &bits, 4);
        }
        break;
    case OL_ST_F16:
        for (int64_t i = 0; i < numel; i++) dst[i] = half_to_float((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
        break;
    default:
        OL_FAIL_INT("safetensors: %s: tensor '%s' is %s, cannot read it as f32", f->path, name, st_types[t->dtype].name);
    }
    return 0;
}

int ol_st_read_i32(const ol_st_file *f, const char *name, int32_t *dst, int64_t numel) {
    const st_tensor *t = lookup(f, name, numel);
    if (!t) return -1;
    const unsigned char *src = f->map + f->data_start + t->begin;
    switch (t->dtype) {
    case OL_ST_I32: memcpy(dst, src, (size_t)numel * 4); break;
    case OL_ST_I64:
        for (int64_t i = 0; i < numel; i++) {
            int64_t v; memcpy(&v, src + 8 * i, 8);
            if (v < INT32_MIN || v > INT32_MAX)
                OL_FAIL_INT("safetensors: %s: tensor '%s': element %lld = %lld does not fit int32", f->path, name, (long long)i, (long long)v);
            dst[i] = (int32_t)v;
        }
        break;
    case OL_ST_I16: for (int64_t i = 0; i < numel; i++) { int16_t v; memcpy(&v, src + 2 * i, 2); dst[i] = v; } break;
    case OL_ST_U16: for (int64_t i = 0; i < numel; i++) { uint16_t v; memcpy(&v, src + 2 * i, 2); dst[i] = v; } break;
    case OL_ST_U8:  for (int64_t i = 0; i < numel; i++) dst[i] = src[i]; break;
    case OL_ST_I8:  for (int64_t i = 0; i < numel; i++) dst[i] = (int8_t)src[i]; break;
    default:
        OL_FAIL_INT("safetensors: %s: tensor '%s' is %s, cannot read it as i32", f->path, name, st_types[t->dtype].name);
    }
    return 0;
}

int ol_st_read_into(const ol_st_file *f, const char *name, ol_tensor *dst) {
    if (!f || !name || !dst) OL_FAIL_INT("safetensors: read_into: NULL argument");
    int32_t i = ol_st_find(f, name);
    if (i < 0) OL_FAIL_INT("safetensors: %s: missing tensor '%s'", f->path, name);
    const st_tensor *t = &f->t[i];
    int same = t->ndim == dst->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == dst->shape[d];
    if (!same) {
        char fs[128];
        int n = snprintf(fs, sizeof fs, "(");
        for (int d = 0; d < t->ndim && n < 110; d++) n += snprintf(fs + n, sizeof fs - n, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        snprintf(fs + n, sizeof fs - n, ")");
        OL_FAIL_INT("safetensors: %s: shape mismatch for '%s': file has %s, model has %s", f->path, name, fs, OL_SHAPE(dst));
    }
    if (dst->dtype == OL_I32) return ol_st_read_i32(f, name, dst->idata, dst->numel);
    return ol_st_read_f32(f, name, dst->data, dst->numel);
}

/* Raw bytes of entry i inside the file's memory map (valid until ol_st_close): the Hugging
 * Face importer converts them itself (engine/io_hf.c) and hands the pages back after use. */
const void *ol_st_data(const ol_st_file *f, int32_t i, int64_t *nbytes) {
    if (!f || i < 0 || i >= f->n) OL_FAIL("safetensors: entry %d out of range", i);
    if (nbytes) *nbytes = f->t[i].end - f->t[i].begin;
    return f->map + f->data_start + f->t[i].begin;
}
