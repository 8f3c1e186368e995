/*
 * test_fuzz_replay.c — make test's share of the fuzzing (tests/fuzz/): the five harnesses,
 * built here with the ordinary compiler, run on every committed input — the hostile corpus
 * (tests/hostile/), the seeds (tests/fuzz/corpus/<target>/) and every crash input found so far
 * (tests/fuzz/crashes/<target>/). A harness aborts on a broken property; a crash ends this
 * program early, which prove reports as a failure (the plan is not reached).
 */
#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "../fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_tokens_one
#include "../fuzz/fuzz_tokens.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_config_one
#include "../fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_llama2c_one
#include "../fuzz/fuzz_llama2c.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_modeldir_one
#include "../fuzz/fuzz_modeldir.c"
#undef LLVMFuzzerTestOneInput
#include "tap.h"
#include <dirent.h>

typedef int (*target_fn)(const uint8_t *, size_t);

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* every regular file of dir, sorted, through fn; returns how many */
static int replay_dir(const char *target, target_fn fn, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    char *names[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096)
        if (e->d_name[0] != '.' && strcmp(e->d_name, "README") != 0) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *fp = fopen(path, "rb");
        uint8_t *buf = NULL;
        long len = -1;
        if (fp && fseek(fp, 0, SEEK_END) == 0 && (len = ftell(fp)) >= 0 && fseek(fp, 0, SEEK_SET) == 0) {
            buf = malloc((size_t)len + 1);
            if (buf && fread(buf, 1, (size_t)len, fp) != (size_t)len) len = -1;
        }
        if (fp) fclose(fp);
        ok(buf && len >= 0 && fn(buf, (size_t)len) == 0, path);
        (void)target;
        free(buf);
        free(names[i]);
    }
    return n;
}

int main(void) {
    int n;
    n = replay_dir("safetensors", fuzz_safetensors_one, "tests/hostile/safetensors");
    n += replay_dir("safetensors", fuzz_safetensors_one, "tests/fuzz/corpus/safetensors");
    replay_dir("safetensors", fuzz_safetensors_one, "tests/fuzz/crashes/safetensors");
    ok(n >= 60, "safetensors: the hostile corpus and the seeds were found (run from the repository root)");
    n = replay_dir("tokens", fuzz_tokens_one, "tests/hostile/tokens");
    n += replay_dir("tokens", fuzz_tokens_one, "tests/fuzz/corpus/tokens");
    replay_dir("tokens", fuzz_tokens_one, "tests/fuzz/crashes/tokens");
    ok(n >= 18, "tokens: the hostile corpus and the seeds were found");
    n = replay_dir("config", fuzz_config_one, "tests/fuzz/corpus/config");
    replay_dir("config", fuzz_config_one, "tests/fuzz/crashes/config");
    ok(n >= 10, "config: the seeds were found");
    n = replay_dir("llama2c", fuzz_llama2c_one, "tests/hostile/llama2c");
    n += replay_dir("llama2c", fuzz_llama2c_one, "tests/fuzz/corpus/llama2c");
    replay_dir("llama2c", fuzz_llama2c_one, "tests/fuzz/crashes/llama2c");
    ok(n >= 50, "llama2c: the hostile corpus was found");
    n = replay_dir("modeldir", fuzz_modeldir_one, "tests/fuzz/corpus/modeldir");
    replay_dir("modeldir", fuzz_modeldir_one, "tests/fuzz/crashes/modeldir");
    ok(n >= 10, "modeldir: the seeds were found");
    return tap_done();
}
