/* moekit fuzz harnesses as plain programs: feed every file of the corpus
 * (tests/fuzz/corpus/<target>, or the directories/files given as arguments)
 * to LLVMFuzzerTestOneInput once. A crash or sanitizer report ends the
 * program, so reaching the summary means every input passed; an empty or
 * missing corpus is a failure, not a silent pass. */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

extern const char fuzz_target_name[];

static int passed, failed;

static void replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "  FAIL %s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    size_t cap = 1 << 16, n = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "  FAIL %s: out of memory\n", path);
        failed++;
        return;
    }
    /* an exact-size copy, so ASan sees a read one past the input */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    fprintf(stderr, "ok %s\n", path);
    passed++;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void replay_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "  FAIL %s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        replay_file(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "  FAIL %s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    if (n == 0) {
        fprintf(stderr, "  FAIL %s: empty corpus\n", path);
        failed++;
    }
    qsort(names, n, sizeof *names, by_name); /* the same order on every machine */
    for (size_t i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        replay_file(p);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            replay_path(argv[i]);
    } else {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", FUZZ_CORPUS_ROOT, fuzz_target_name);
        replay_path(dir);
    }
    printf("fuzz_%s: %d passed, %d failed\n", fuzz_target_name, passed, failed);
    return failed ? 1 : 0;
}
