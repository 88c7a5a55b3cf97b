/* moekit fuzz harnesses: scratch files (see fuzz.h). */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char scratch[256];

static void remove_scratch(void)
{
    DIR *d = opendir(scratch);
    if (!d)
        return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", scratch, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(scratch);
}

const char *fuzz_scratch_dir(void)
{
    if (scratch[0])
        return scratch;
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/moekit-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(scratch)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(remove_scratch);
    return scratch;
}

const char *fuzz_write_file(const char *name, const void *data, size_t size)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_scratch_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

char *fuzz_strdup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* LeakSanitizer reads this hook in every harness build (libFuzzer and
 * replay under ASan). libconfig 1.5 (Debian 12) leaks its scanner's copy of
 * a string token when a syntax error follows it (`Hinclude "x"`,
 * `a = 0; b""c"`): config_destroy never frees it. Reproduced with libconfig
 * alone (config_read_string + config_destroy); the allocation is libconfig's,
 * not moekit's, so it is not a finding. Nothing of moekit is suppressed. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:strbuf_append\nleak:libconfig_yylex\n";
}
