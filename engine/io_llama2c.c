/*
 * io_llama2c.c — llama2.c's checkpoints and tokenizers (karpathy/llama2.c run.c, export.py),
 * memory-mapped read-only. Names and the conversion into the project's LLaMA live in
 * lua/outlierlab/pretrained/llama2c.lua.
 *   version 0 (legacy): 7 int32 {dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
 *     seq_len}, vocab_size negative when the classifier is not tied; fp32 arrays token_embedding,
 *     rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_cis_real, freq_cis_imag
 *     (seq_len x head_size/2 each, skipped), then wcls when untied.
 *   version 1: uint32 magic "ak42" (0x616b3432), int32 version, the 7 int32, uint8 shared
 *     classifier, zeros up to 256 bytes; fp32 rms_att, rms_ffn, rms_final, token_embedding, wq,
 *     wk, wv, wo, w1, w2, w3, [wcls].
 *   version 2 (Q8_0): as version 1 with int32 group_size after the flag; fp32 rms_att, rms_ffn,
 *     rms_final; then int8 token_embedding, wq, …, w3, [wcls]; then the fp32 scales of each of
 *     those in the same order, one per group of group_size values of each layer's matrix.
 * Opening checks every header field (named in the message, with the file) and that the file
 * holds exactly the bytes the header implies; sizes are computed with overflow checks, so a
 * header that lies is refused before anything is read. Reading a tensor refuses +-Inf and NaN.
 * tokenizer.bin: int32 max_token_length, then per piece float32 score, int32 length, the bytes.
 * The file does not say how many pieces it holds (run.c takes the model's vocab_size).
 */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define L2C_MAGIC 0x616b3432u
#define L2C_HEADER 256
#define L2C_LIMIT ((int64_t)1 << 56)   /* no size past this: products below never overflow */

static const char *L2C_NAMES[OL_L2C_NTENSORS] = {
    "token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final", "wcls"};

struct ol_l2c_file {
    char *path;
    unsigned char *map;
    int64_t size;
    int32_t hdr[OL_L2C_NHEADER];
    int64_t numel[OL_L2C_NTENSORS];   /* elements of one layer's tensor */
    int64_t off[OL_L2C_NTENSORS];     /* byte offset of layer 0's values (fp32, or int8 in version 2) */
    int64_t soff[OL_L2C_NTENSORS];    /* version 2: byte offset of layer 0's scales, -1 for fp32 tensors */
    int32_t layered[OL_L2C_NTENSORS];
};

#define L2C_BAD(...) do { ol__set_error(__VA_ARGS__); ol_l2c_close(f); return NULL; } while (0)

/* a * b, or -1 when it passes L2C_LIMIT (a, b >= 0) */
static int64_t mul(int64_t a, int64_t b) {
    if (a < 0 || b < 0) return -1;
    if (a != 0 && b > L2C_LIMIT / a) return -1;
    return a * b;
}

static int32_t rd_i32(const unsigned char *p) { int32_t v; memcpy(&v, p, 4); return v; }

void ol_l2c_close(ol_l2c_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, (size_t)f->size);
    free(f->path);
    free(f);
}

static const char *HDR_NAMES[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};

ol_l2c_file *ol_l2c_open(const char *path) {
    if (!path) OL_FAIL("llama2c: NULL path");
    ol_l2c_file *f = calloc(1, sizeof *f);
    if (!f) OL_FAIL("llama2c: out of memory");
    f->path = strdup(path);
    if (!f->path) L2C_BAD("llama2c: out of memory");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) L2C_BAD("llama2c: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); L2C_BAD("llama2c: cannot stat %s: %s", path, strerror(e)); }
    if (!S_ISREG(st.st_mode)) { close(fd); L2C_BAD("llama2c: %s is not a regular file", path); }
    f->size = (int64_t)st.st_size;
    if (f->size < 28) { close(fd); L2C_BAD("llama2c: %s is truncated: %lld bytes, less than the 28-byte header of 7 int32", path, (long long)f->size); }
    f->map = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) { f->map = NULL; L2C_BAD("llama2c: cannot map %s: %s", path, strerror(errno)); }
    const unsigned char *m = f->map;
    int32_t *h = f->hdr;
    int32_t version = 0, shared, group = 0;
    int64_t pos;
    uint32_t magic;
    memcpy(&magic, m, 4);
    if (magic == L2C_MAGIC) {
        if (f->size < L2C_HEADER) L2C_BAD("llama2c: %s is truncated: %lld bytes, less than the 256-byte header of a version 1/2 checkpoint (magic \"ak42\")", path, (long long)f->size);
        version = rd_i32(m + 4);
        if (version != 1 && version != 2) L2C_BAD("llama2c: %s: header 'version' = %d is not supported (0, 1 and 2 are)", path, version);
        for (int i = 0; i < 7; i++) h[1 + i] = rd_i32(m + 8 + 4 * i);
        uint8_t flag = m[36];
        if (flag > 1) L2C_BAD("llama2c: %s: header 'shared_classifier' = %d must be 0 or 1", path, flag);
        shared = flag;
        if (version == 2) {
            group = rd_i32(m + 37);
            if (group < 1) L2C_BAD("llama2c: %s: header 'group_size' = %d must be at least 1", path, group);
        }
        pos = L2C_HEADER;
    } else {
        for (int i = 0; i < 7; i++) h[1 + i] = rd_i32(m + 4 * i);
        if (h[6] == INT32_MIN) L2C_BAD("llama2c: %s: header 'vocab_size' = %d is out of range", path, h[6]);
        shared = h[6] > 0;
        if (h[6] < 0) h[6] = -h[6];
        pos = 28;
    }
    h[0] = version;
    h[8] = shared;
    h[9] = group;
    for (int i = 0; i < 7; i++)
        if (h[1 + i] < 1) L2C_BAD("llama2c: %s: header '%s' = %d must be at least 1%s", path, HDR_NAMES[i], h[1 + i],
                                   i == 5 && version == 0 ? " (its sign says whether the classifier is tied)" : "");
    int64_t dim = h[1], hid = h[2], L = h[3], NH = h[4], NKV = h[5], V = h[6], T = h[7];
    if (dim % NH != 0) L2C_BAD("llama2c: %s: header 'n_heads' = %lld does not divide 'dim' = %lld", path, (long long)NH, (long long)dim);
    if (NKV > NH || NH % NKV != 0) L2C_BAD("llama2c: %s: header 'n_kv_heads' = %lld does not divide 'n_heads' = %lld", path, (long long)NKV, (long long)NH);
    int64_t hs = dim / NH;
    if (hs % 2 != 0) L2C_BAD("llama2c: %s: head size dim / n_heads = %lld must be even (RoPE rotates pairs)", path, (long long)hs);
    int64_t kv = hs * NKV;
    int64_t n[OL_L2C_NTENSORS] = {
        [OL_L2C_TOK] = mul(V, dim), [OL_L2C_RMS_ATT] = dim, [OL_L2C_WQ] = mul(dim, dim), [OL_L2C_WK] = mul(kv, dim),
        [OL_L2C_WV] = mul(kv, dim), [OL_L2C_WO] = mul(dim, dim), [OL_L2C_RMS_FFN] = dim, [OL_L2C_W1] = mul(hid, dim),
        [OL_L2C_W2] = mul(dim, hid), [OL_L2C_W3] = mul(hid, dim), [OL_L2C_RMS_FINAL] = dim, [OL_L2C_WCLS] = mul(V, dim)};
    for (int i = 0; i < OL_L2C_NTENSORS; i++) {
        f->numel[i] = n[i];
        f->layered[i] = i != OL_L2C_TOK && i != OL_L2C_RMS_FINAL && i != OL_L2C_WCLS;
        f->soff[i] = -1;
        if (n[i] < 0 || (f->layered[i] && mul(n[i], L) < 0))
            L2C_BAD("llama2c: %s: header sizes overflow: %s of %lld layers (dim %lld, hidden_dim %lld, vocab_size %lld) is larger than any file", path,
                    L2C_NAMES[i], (long long)L, (long long)dim, (long long)hid, (long long)V);
    }
    /* the order of the arrays in the file, each (layers x) numel */
    static const int ORDER0[] = {OL_L2C_TOK, OL_L2C_RMS_ATT, OL_L2C_WQ, OL_L2C_WK, OL_L2C_WV, OL_L2C_WO, OL_L2C_RMS_FFN,
                                 OL_L2C_W1, OL_L2C_W2, OL_L2C_W3, OL_L2C_RMS_FINAL, -1, OL_L2C_WCLS};
    static const int ORDER1[] = {OL_L2C_RMS_ATT, OL_L2C_RMS_FFN, OL_L2C_RMS_FINAL, OL_L2C_TOK, OL_L2C_WQ, OL_L2C_WK, OL_L2C_WV,
                                 OL_L2C_WO, OL_L2C_W1, OL_L2C_W2, OL_L2C_W3, OL_L2C_WCLS};
    static const int ORDER2Q[] = {OL_L2C_TOK, OL_L2C_WQ, OL_L2C_WK, OL_L2C_WV, OL_L2C_WO, OL_L2C_W1, OL_L2C_W2, OL_L2C_W3, OL_L2C_WCLS};
    const int *order = version == 0 ? ORDER0 : ORDER1;
    int norder = version == 0 ? 13 : 12;
    if (version == 2) norder = 3;
    for (int k = 0; k < norder; k++) {
        int i = order[k];
        int64_t bytes;
        if (i == -1) bytes = mul(mul(T, hs), 4);   /* freq_cis_real and freq_cis_imag: (seq_len, head_size/2) each */
        else {
            if (i == OL_L2C_WCLS && shared) continue;
            bytes = mul(mul(n[i], f->layered[i] ? L : 1), 4);
            f->off[i] = pos;
        }
        if (bytes < 0) L2C_BAD("llama2c: %s: header 'seq_len' = %lld overflows the size of freq_cis", path, (long long)T);
        pos += bytes;
        if (pos > L2C_LIMIT) L2C_BAD("llama2c: %s: the header's sizes overflow", path);
    }
    if (version == 2) {
        for (int k = 0; k < 9; k++) {
            int i = ORDER2Q[k];
            if (i == OL_L2C_WCLS && shared) continue;
            if (n[i] % group != 0)
                L2C_BAD("llama2c: %s: header 'group_size' = %d does not divide the %lld values of %s", path, group, (long long)n[i], L2C_NAMES[i]);
            f->off[i] = pos;
            pos += mul(n[i], f->layered[i] ? L : 1);
            if (pos > L2C_LIMIT) L2C_BAD("llama2c: %s: the header's sizes overflow", path);
        }
        for (int k = 0; k < 9; k++) {
            int i = ORDER2Q[k];
            if (i == OL_L2C_WCLS && shared) continue;
            f->soff[i] = pos;
            pos += mul(n[i] / group, f->layered[i] ? L : 1) * 4;
            if (pos > L2C_LIMIT) L2C_BAD("llama2c: %s: the header's sizes overflow", path);
        }
    }
    if (shared) { f->off[OL_L2C_WCLS] = f->off[OL_L2C_TOK]; f->soff[OL_L2C_WCLS] = f->soff[OL_L2C_TOK]; }
    if (pos != f->size)
        L2C_BAD("llama2c: %s %s: %lld bytes, but its version %d header (dim %lld, hidden_dim %lld, n_layers %lld, n_heads %lld, "
                "n_kv_heads %lld, vocab_size %lld%s, seq_len %lld) implies %lld", path,
                pos > f->size ? "is truncated" : "has bytes the header does not account for", (long long)f->size, version,
                (long long)dim, (long long)hid, (long long)L, (long long)NH, (long long)NKV, (long long)V,
                shared ? " tied" : " untied", (long long)T, (long long)pos);
    return f;
}

int ol_l2c_header(const ol_l2c_file *f, int32_t *out) {
    if (!f || !out) OL_FAIL_INT("llama2c: header: bad arguments");
    memcpy(out, f->hdr, sizeof f->hdr);
    return 0;
}

int64_t ol_l2c_numel(const ol_l2c_file *f, int32_t which) {
    if (!f || which < 0 || which >= OL_L2C_NTENSORS) { ol__set_error("llama2c: numel: bad tensor %d", which); return -1; }
    return f->numel[which];
}

const char *ol_l2c_tensor_name(int32_t which) {
    return which >= 0 && which < OL_L2C_NTENSORS ? L2C_NAMES[which] : NULL;
}

int ol_l2c_read(const ol_l2c_file *f, int32_t which, int32_t layer, float *dst) {
    if (!f || !dst || which < 0 || which >= OL_L2C_NTENSORS) OL_FAIL_INT("llama2c: read: bad arguments");
    int64_t n = f->numel[which];
    int64_t L = f->layered[which] ? f->hdr[3] : 1;
    if (layer < 0 || layer >= L) OL_FAIL_INT("llama2c: %s: %s has no layer %d", f->path, L2C_NAMES[which], layer);
    if (f->soff[which] < 0) {
        memcpy(dst, f->map + f->off[which] + 4 * n * layer, (size_t)(4 * n));
    } else {
        int64_t g = f->hdr[9];
        const int8_t *q = (const int8_t *)(f->map + f->off[which] + n * layer);
        const unsigned char *s = f->map + f->soff[which] + 4 * (n / g) * layer;
        for (int64_t j = 0; j < n / g; j++) {
            float sc;
            memcpy(&sc, s + 4 * j, 4);
            for (int64_t k = 0; k < g; k++) dst[j * g + k] = (float)q[j * g + k] * sc;
        }
    }
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(dst[i])) {
            char where[32] = "";
            if (f->layered[which]) snprintf(where, sizeof where, " of layer %d", layer);
            OL_FAIL_INT("llama2c: %s: %s%s holds %s at element %lld: a checkpoint with non-finite weights is refused", f->path,
                        L2C_NAMES[which], where, isnan(dst[i]) ? "NaN" : (dst[i] > 0 ? "+Inf" : "-Inf"), (long long)i);
        }
    return 0;
}

/* ------------------------------------------------------------------ tokenizer.bin */
struct ol_l2c_tok {
    char *path;
    int32_t n, max_len;
    float *scores;
    int64_t *start;   /* piece i: bytes [start[i], start[i] + len[i]) of data */
    int32_t *len;
    char *data;       /* the pieces, each followed by a NUL */
};

void ol_l2c_tok_close(ol_l2c_tok *t) {
    if (!t) return;
    free(t->path); free(t->scores); free(t->start); free(t->len); free(t->data);
    free(t);
}

#define TOK_BAD(...) do { ol__set_error(__VA_ARGS__); free(buf); ol_l2c_tok_close(t); return NULL; } while (0)

ol_l2c_tok *ol_l2c_tok_open(const char *path, int32_t vocab_size) {
    if (!path) OL_FAIL("llama2c: tokenizer: NULL path");
    unsigned char *buf = NULL;
    ol_l2c_tok *t = calloc(1, sizeof *t);
    if (!t) OL_FAIL("llama2c: out of memory");
    t->path = strdup(path);
    FILE *fp = fopen(path, "rb");
    if (!fp) TOK_BAD("llama2c: cannot open tokenizer %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) { fclose(fp); TOK_BAD("llama2c: tokenizer %s is not a regular file", path); }
    int64_t size = (int64_t)st.st_size;
    if (size > ((int64_t)1 << 31)) { fclose(fp); TOK_BAD("llama2c: tokenizer %s: %lld bytes is larger than any tokenizer (2 GiB)", path, (long long)size); }
    buf = malloc((size_t)size + 1);
    if (!buf) { fclose(fp); TOK_BAD("llama2c: out of memory reading %s", path); }
    size_t got = fread(buf, 1, (size_t)size, fp);
    fclose(fp);
    if ((int64_t)got != size) TOK_BAD("llama2c: cannot read tokenizer %s", path);
    if (size < 4) TOK_BAD("llama2c: tokenizer %s is truncated: %lld bytes, less than its 4-byte max_token_length", path, (long long)size);
    t->max_len = rd_i32(buf);
    if (t->max_len < 1) TOK_BAD("llama2c: tokenizer %s: 'max_token_length' = %d must be at least 1", path, t->max_len);
    /* count the pieces first (the file's length decides when vocab_size <= 0) */
    int64_t pos = 4, n = 0, bytes = 0;
    while (pos < size && (vocab_size <= 0 || n < vocab_size)) {
        if (size - pos < 8) TOK_BAD("llama2c: tokenizer %s is truncated in piece %lld: %lld bytes left, less than its score and length", path, (long long)n, (long long)(size - pos));
        float sc;
        memcpy(&sc, buf + pos, 4);
        int32_t len = rd_i32(buf + pos + 4);
        if (!isfinite(sc)) TOK_BAD("llama2c: tokenizer %s: piece %lld has score %s (scores must be finite)", path, (long long)n, isnan(sc) ? "NaN" : "Inf");
        if (len < 1 || len > t->max_len)
            TOK_BAD("llama2c: tokenizer %s: piece %lld has length %d, outside 1 .. max_token_length %d", path, (long long)n, len, t->max_len);
        if (size - pos - 8 < len) TOK_BAD("llama2c: tokenizer %s is truncated in piece %lld: its length %d passes the end of the file", path, (long long)n, len);
        pos += 8 + len;
        bytes += len + 1;
        n++;
    }
    if (vocab_size > 0 && n < vocab_size)
        TOK_BAD("llama2c: tokenizer %s holds %lld pieces, but the model's vocab_size is %d", path, (long long)n, vocab_size);
    if (pos != size)
        TOK_BAD("llama2c: tokenizer %s has %lld bytes after its %lld pieces (the model's vocab_size is %d: is it the model's tokenizer?)", path,
                (long long)(size - pos), (long long)n, vocab_size);
    if (n == 0) TOK_BAD("llama2c: tokenizer %s holds no pieces", path);
    t->n = (int32_t)n;
    t->scores = malloc((size_t)n * sizeof *t->scores);
    t->start = malloc((size_t)n * sizeof *t->start);
    t->len = malloc((size_t)n * sizeof *t->len);
    t->data = malloc((size_t)bytes);
    if (!t->scores || !t->start || !t->len || !t->data) TOK_BAD("llama2c: out of memory reading %s", path);
    pos = 4;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        memcpy(&t->scores[i], buf + pos, 4);
        t->len[i] = rd_i32(buf + pos + 4);
        memcpy(t->data + at, buf + pos + 8, (size_t)t->len[i]);
        t->data[at + t->len[i]] = 0;
        t->start[i] = at;
        at += t->len[i] + 1;
        pos += 8 + t->len[i];
    }
    free(buf);
    return t;
}

int32_t ol_l2c_tok_count(const ol_l2c_tok *t) { return t ? t->n : -1; }
int32_t ol_l2c_tok_max_len(const ol_l2c_tok *t) { return t ? t->max_len : -1; }

const char *ol_l2c_tok_piece(const ol_l2c_tok *t, int32_t i, int32_t *len, float *score) {
    if (!t || i < 0 || i >= t->n) { ol__set_error("llama2c: tokenizer: no piece %d", i); return NULL; }
    if (len) *len = t->len[i];
    if (score) *score = t->scores[i];
    return t->data + t->start[i];
}
