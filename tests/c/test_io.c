/*
 * test_io.c — the io section of the engine from C: safetensors writer/reader round trip and
 * rejection of damaged files, token files (both formats) and synthetic images.
 */
#define _GNU_SOURCE
#include "outlierlab.h"
#include "tap.h"
#include <stdlib.h>
#include <unistd.h>

static char dir[] = "/tmp/ol_test_io_XXXXXX";

static void path_of(char *buf, const char *name) { snprintf(buf, 256, "%s/%s", dir, name); }

static long file_size(const char *p) {
    FILE *f = fopen(p, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void truncate_copy(const char *src, const char *dst, long keep) {
    FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
    for (long i = 0; i < keep; i++) { int c = fgetc(a); if (c == EOF) break; fputc(c, b); }
    fclose(a); fclose(b);
}

int main(void) {
    if (!mkdtemp(dir)) { printf("Bail out! mkdtemp\n"); return 1; }
    char p[256], q[256];

    /* ---- safetensors round trip */
    float w[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
    int32_t ids[3] = {7, -1, 123456};
    int64_t ws[2] = {2, 3}, is[1] = {3};
    ol_st_writer *wr = ol_st_writer_new();
    ok(wr != NULL, "writer created");
    is_int(ol_st_writer_add(wr, "w", OL_ST_F32, 2, ws, w), 0, "add F32 (2,3)");
    is_int(ol_st_writer_add(wr, "ids", OL_ST_I32, 1, is, ids), 0, "add I32 (3)");
    is_int(ol_st_writer_add(wr, "w", OL_ST_F32, 2, ws, w), -1, "duplicate name refused");
    like(ol_error(), "added twice", "…with a message");
    is_int(ol_st_writer_set_metadata(wr, "step", "12"), 0, "metadata");
    path_of(p, "a.safetensors");
    is_int(ol_st_writer_save(wr, p), 0, "save");
    ol_st_writer_free(wr);

    ol_st_file *f = ol_st_open(p);
    ok(f != NULL, "open the written file");
    is_int(ol_st_count(f), 2, "two tensors");
    int32_t dt, nd; int64_t sh[8];
    is_int(ol_st_info(f, ol_st_find(f, "w"), &dt, &nd, sh), 0, "info");
    ok(dt == OL_ST_F32 && nd == 2 && sh[0] == 2 && sh[1] == 3, "dtype and shape of w");
    float wb[6];
    is_int(ol_st_read_f32(f, "w", wb, 6), 0, "read w");
    ok(memcmp(w, wb, sizeof w) == 0, "w bit-identical");
    int32_t ib[3];
    is_int(ol_st_read_i32(f, "ids", ib, 3), 0, "read ids");
    ok(memcmp(ids, ib, sizeof ids) == 0, "ids identical");
    is_str(ol_st_metadata(f, "step"), "12", "metadata value");
    ok(ol_st_metadata(f, "nope") == NULL, "absent metadata key is NULL");
    is_int(ol_st_read_f32(f, "w", wb, 5), -1, "element count mismatch refused");
    is_int(ol_st_read_f32(f, "zz", wb, 6), -1, "missing tensor refused");
    like(ol_error(), "missing tensor 'zz'", "…naming the tensor");
    ol_st_close(f);

    /* ---- damaged files */
    long n = file_size(p);
    path_of(q, "trunc.safetensors");
    truncate_copy(p, q, n - 4);
    ok(ol_st_open(q) == NULL, "truncated file refused");
    like(ol_error(), q, "…naming the file");
    like(ol_error(), "offset past end", "…and the problem");
    truncate_copy(p, q, 6);
    ok(ol_st_open(q) == NULL, "6-byte file refused");
    like(ol_error(), "truncated", "…as truncated");
    path_of(q, "none.safetensors");
    ok(ol_st_open(q) == NULL, "missing file refused");
    like(ol_error(), "No such file", "…with the system's reason");

    /* ---- token files */
    int32_t toks[5] = {1, 2, 65535, 0, 300};
    path_of(p, "t.bin");
    is_int(ol_tokens_write(p, OL_TOK_LLMC, toks, 5), 0, "write llm.c tokens");
    is_int(file_size(p), 1024 + 10, "llm.c size = header + 2 bytes per token");
    ol_token_file *tf = ol_tokens_open(p, OL_TOK_AUTO);
    ok(tf != NULL, "open llm.c file");
    is_int(ol_tokens_count(tf), 5, "count");
    is_int(ol_tokens_format(tf), OL_TOK_LLMC, "auto-detected llm.c");
    is_int(ol_tokens_max(tf), 65535, "max");
    int32_t back[5];
    is_int(ol_tokens_copy_i32(tf, 0, 5, back), 0, "copy");
    ok(memcmp(back, toks, sizeof toks) == 0, "tokens identical");
    is_int(ol_tokens_copy_i32(tf, 3, 3, back), -1, "window past the end refused");
    ol_tokens_close(tf);
    path_of(q, "t_trunc.bin");
    truncate_copy(p, q, 1024 + 9);
    ok(ol_tokens_open(q, OL_TOK_AUTO) == NULL, "truncated llm.c file refused");
    like(ol_error(), "size mismatch", "…size mismatch named");
    like(ol_error(), q, "…and the file");
    toks[1] = 70000;
    is_int(ol_tokens_write(p, OL_TOK_RAW16, toks, 5), -1, "token > 65535 refused by the writer");

    /* ---- images */
    enum { H = 16 };
    static float a[3 * H * H], b[3 * H * H];
    static uint8_t ma[H * H], mb[H * H];
    is_int(ol_image_synth(a, ma, H, H, 0, 5, 9), 0, "synth image");
    is_int(ol_image_synth(b, mb, H, H, 0, 5, 9), 0, "synth again");
    ok(memcmp(a, b, sizeof a) == 0 && memcmp(ma, mb, sizeof ma) == 0, "same (seed, index) -> same image and mask");
    ol_image_synth(b, mb, H, H, 0, 5, 10);
    ok(memcmp(a, b, sizeof a) != 0, "another index -> another image");
    ok(ma[(H / 2) * H + H / 2] == 1 && ma[0] == 0, "disc covers the centre, not the corner");
    is_int(ol_image_synth(a, ma, H, H, 99, 5, 9), -1, "unknown class refused");
    is_str(ol_image_class_name(4), "ring", "class names");

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    return tap_done();
}
