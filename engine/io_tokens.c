/*
 * io_tokens.c — token files, memory-mapped read-only, in the two formats of the field:
 *   nanoGPT  (data/<name>/train.bin): bare uint16 tokens, little-endian, no header.
 *   llm.c    (dev/data/<name>.bin): header of 256 int32 {20240520, version, count, 0, ...}
 *            (1024 bytes), then count tokens: uint16 for version 1, uint32 for version 2.
 * Opening checks the header (magic, version, count) and that the file size is exactly what
 * the header promises, as llm.c's dataloader does; every error names the file. Automatic
 * detection refuses a file that starts like a header but fails the checks (see below).
 * The writer (used by tests and by the byte-level tokenizer) writes atomically.
 */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLMC_MAGIC 20240520
#define LLMC_MODEL_MAGIC 20240326       /* llm.c's other files: a GPT-2 checkpoint, */
#define LLMC_TOKENIZER_MAGIC 20240328   /* and its tokenizer */
#define LLMC_HEADER_BYTES 1024

struct ol_token_file {
    char   *path;
    unsigned char *map;
    int64_t size;          /* file bytes */
    const unsigned char *tokens;
    int64_t count;
    int32_t format, width;
    int64_t max;           /* -1 until computed */
};

void ol_tokens_close(ol_token_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, (size_t)f->size);
    free(f->path);
    free(f);
}

#define TOK_BAD(...) do { ol__set_error(__VA_ARGS__); ol_tokens_close(f); return NULL; } while (0)

ol_token_file *ol_tokens_open(const char *path, int32_t format) {
    if (!path) OL_FAIL("tokens: NULL path");
    if (format < OL_TOK_AUTO || format > OL_TOK_LLMC) OL_FAIL("tokens: %s: unknown format %d", path, format);
    ol_token_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) { free(f); OL_FAIL("tokens: out of memory"); }
    f->max = -1;
    int fd = open(path, O_RDONLY);
    if (fd < 0) TOK_BAD("tokens: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); TOK_BAD("tokens: cannot stat %s: %s", path, strerror(e)); }
    f->size = (int64_t)st.st_size;
    if (f->size == 0) { close(fd); TOK_BAD("tokens: %s is empty", path); }
    f->map = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) { f->map = NULL; TOK_BAD("tokens: cannot map %s: %s", path, strerror(errno)); }

    int32_t magic = 0;
    if (f->size >= 4) memcpy(&magic, f->map, 4);
    if (format == OL_TOK_AUTO) {
        /* A file that starts like an llm.c header but fails its checks is an error, never
         * raw tokens (its header words would become data): a byte-swapped magic, or a
         * header-shaped start (version 1 or 2, the 253 reserved words zero) under another
         * magic. Raw token data starting with 506 zero tokens is the only false alarm. */
        if (magic == LLMC_MODEL_MAGIC || magic == LLMC_TOKENIZER_MAGIC)
            TOK_BAD("tokens: %s: this is an %s (magic %d), not a token file (magic %d)", path,
                    magic == LLMC_MODEL_MAGIC ? "llm.c model checkpoint" : "llm.c tokenizer file", magic, LLMC_MAGIC);
        if (magic != LLMC_MAGIC && (int32_t)__builtin_bswap32((uint32_t)magic) == LLMC_MAGIC)
            TOK_BAD("tokens: %s: byte-swapped llm.c magic (big-endian header %d); llm.c token files are little-endian",
                    path, LLMC_MAGIC);
        if (magic != LLMC_MAGIC && f->size >= LLMC_HEADER_BYTES) {
            int32_t hdr[LLMC_HEADER_BYTES / 4];
            memcpy(hdr, f->map, sizeof hdr);
            int zeros = 1;
            for (int i = 3; i < LLMC_HEADER_BYTES / 4 && zeros; i++) zeros = hdr[i] == 0;
            uint32_t v = (uint32_t)hdr[1], vs = __builtin_bswap32(v);
            if (zeros && (v == 1 || v == 2 || vs == 1 || vs == 2))
                TOK_BAD("tokens: %s: starts like an llm.c header (version %d, reserved words zero) but its magic is %d, "
                        "not %d: a damaged or foreign header (open it with format raw16 to read the bytes as tokens)",
                        path, v == 1 || v == 2 ? (int)v : (int)vs, magic, LLMC_MAGIC);
        }
        format = magic == LLMC_MAGIC ? OL_TOK_LLMC : OL_TOK_RAW16;
    }
    f->format = format;
    if (format == OL_TOK_LLMC) {
        if (f->size < LLMC_HEADER_BYTES)
            TOK_BAD("tokens: %s: truncated llm.c header (%lld bytes, the header alone is %d)", path, (long long)f->size, LLMC_HEADER_BYTES);
        int32_t hdr[3];
        memcpy(hdr, f->map, sizeof hdr);
        if (hdr[0] != LLMC_MAGIC) TOK_BAD("tokens: %s: bad magic number %d in the llm.c header (expected %d)", path, hdr[0], LLMC_MAGIC);
        if (hdr[1] != 1 && hdr[1] != 2)
            TOK_BAD("tokens: %s: unsupported llm.c version %d (1 = uint16 tokens, 2 = uint32 tokens)", path, hdr[1]);
        if (hdr[2] < 0) TOK_BAD("tokens: %s: negative token count %d in the header", path, hdr[2]);
        f->width = hdr[1] == 1 ? 2 : 4;
        f->count = hdr[2];
        int64_t want = LLMC_HEADER_BYTES + f->count * f->width;
        if (f->size != want)
            TOK_BAD("tokens: %s: size mismatch: the header says %lld tokens (%lld bytes with the header) but the file has %lld bytes%s",
                    path, (long long)f->count, (long long)want, (long long)f->size, f->size < want ? " (truncated?)" : "");
        f->tokens = f->map + LLMC_HEADER_BYTES;
    } else {
        if (f->size % 2 != 0)
            TOK_BAD("tokens: %s: odd size %lld bytes for a raw uint16 token file (truncated?)", path, (long long)f->size);
        f->width = 2;
        f->count = f->size / 2;
        f->tokens = f->map;
    }
    if (f->count == 0) TOK_BAD("tokens: %s holds no tokens", path);
    return f;
}

int64_t ol_tokens_count(const ol_token_file *f) { return f ? f->count : -1; }
int32_t ol_tokens_format(const ol_token_file *f) { return f ? f->format : -1; }
int32_t ol_tokens_width(const ol_token_file *f) { return f ? f->width : -1; }

int64_t ol_tokens_max(ol_token_file *f) {
    if (!f) OL_FAIL_INT("tokens: NULL file");
    if (f->max >= 0) return f->max;
    int64_t mx = 0;
    if (f->width == 2) {
        const uint16_t *p = (const uint16_t *)f->tokens;
        for (int64_t i = 0; i < f->count; i++) if (p[i] > mx) mx = p[i];
    } else {
        const uint32_t *p = (const uint32_t *)f->tokens;
        for (int64_t i = 0; i < f->count; i++) if (p[i] > mx) mx = p[i];
    }
    f->max = mx;
    return mx;
}

/* dst (n) int32 <- tokens [start, start+n) */
int ol_tokens_copy_i32(const ol_token_file *f, int64_t start, int64_t n, int32_t *dst) {
    if (!f || !dst) OL_FAIL_INT("tokens: copy: NULL argument");
    if (start < 0 || n < 0 || start > f->count - n)
        OL_FAIL_INT("tokens: %s: window [%lld, %lld) outside the %lld tokens", f->path,
                    (long long)start, (long long)(start + n), (long long)f->count);
    if (f->width == 2) {
        const uint16_t *p = (const uint16_t *)f->tokens + start;
        for (int64_t i = 0; i < n; i++) dst[i] = p[i];
    } else {
        const uint32_t *p = (const uint32_t *)f->tokens + start;
        for (int64_t i = 0; i < n; i++) {
            if (p[i] > INT32_MAX) OL_FAIL_INT("tokens: %s: token %lld = %u does not fit int32", f->path, (long long)(start + i), p[i]);
            dst[i] = (int32_t)p[i];
        }
    }
    return 0;
}

int ol_tokens_write(const char *path, int32_t format, const int32_t *tokens, int64_t n) {
    if (!path || (!tokens && n > 0)) OL_FAIL_INT("tokens: write: NULL argument");
    if (format != OL_TOK_RAW16 && format != OL_TOK_LLMC) OL_FAIL_INT("tokens: write %s: format must be RAW16 or LLMC", path);
    if (n < 0 || (format == OL_TOK_LLMC && n > INT32_MAX))
        OL_FAIL_INT("tokens: write %s: token count %lld does not fit the format", path, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] > 65535)
            OL_FAIL_INT("tokens: write %s: token %lld = %d is outside [0, 65535] (uint16 formats)", path, (long long)i, tokens[i]);
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) OL_FAIL_INT("tokens: path too long: %s", path);
    FILE *fp = fopen(tmp, "wb");
    if (!fp) OL_FAIL_INT("tokens: cannot create %s: %s", tmp, strerror(errno));
    int ok = 1;
    if (format == OL_TOK_LLMC) {
        int32_t hdr[256] = {0};
        hdr[0] = LLMC_MAGIC; hdr[1] = 1; hdr[2] = (int32_t)n;
        ok = fwrite(hdr, 4, 256, fp) == 256;
    }
    uint16_t buf[4096];
    for (int64_t i = 0; ok && i < n; i += 4096) {
        int64_t k = n - i < 4096 ? n - i : 4096;
        for (int64_t j = 0; j < k; j++) buf[j] = (uint16_t)tokens[i + j];
        ok = fwrite(buf, 2, (size_t)k, fp) == (size_t)k;
    }
    if (ok && fflush(fp) != 0) ok = 0;
    if (ok && fsync(fileno(fp)) != 0) ok = 0;
    int err = errno;
    if (fclose(fp) != 0 && ok) { ok = 0; err = errno; }
    if (!ok) { unlink(tmp); OL_FAIL_INT("tokens: writing %s failed: %s", tmp, strerror(err)); }
    if (rename(tmp, path) != 0) { err = errno; unlink(tmp); OL_FAIL_INT("tokens: cannot rename %s to %s: %s", tmp, path, strerror(err)); }
    return 0;
}
