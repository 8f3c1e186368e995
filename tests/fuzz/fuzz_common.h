/*
 * fuzz_common.h — what the fuzz harnesses share: the input as a file (the readers take a
 * path), and the rule that a refused input's message names that file.
 * The harnesses define LLVMFuzzerTestOneInput (libFuzzer, make fuzz); tests/c/test_fuzz_replay.c
 * includes them under other names and feeds them the committed corpus with gcc (make test).
 */
#ifndef OL_FUZZ_COMMON_H
#define OL_FUZZ_COMMON_H
#define _GNU_SOURCE
#include "outlierlab.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The bytes as a file: one memory file per process, rewritten for every input; its path is
 * /proc/self/fd/<n>. */
static const char *fuzz_file(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("ol_fuzz_input", 0);
        if (fd < 0) { perror("memfd_create"); abort(); }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0) { perror("ftruncate"); abort(); }
    size_t done = 0;
    while (done < size) {
        ssize_t k = pwrite(fd, data + done, size - done, (off_t)done);
        if (k <= 0) { perror("pwrite"); abort(); }
        done += (size_t)k;
    }
    return path;
}

/* A refusal must say which file it refused. */
static void fuzz_check_error(const char *what, const char *path) {
    const char *e = ol_error();
    if (!e || !strstr(e, path)) {
        fprintf(stderr, "%s: the error does not name the file %s: '%s'\n", what, path, e ? e : "(null)");
        abort();
    }
    ol_clear_error();
}
#endif
