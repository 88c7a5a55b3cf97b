/* moekit tests: files under a test's temporary directory. The including
 * test defines `static char tmp_dir[]` (made with mkdtemp in main) and
 * includes check.h first. */
#ifndef MOE_TEST_TMP_FILES_H
#define MOE_TEST_TMP_FILES_H

#include <stdio.h>

/* tmp_dir/name, in one of 8 buffers used in turn (a call may hold a few) */
static const char *tmp_path(const char *name)
{
    static char bufs[8][4096];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, 4096, "%s/%s", tmp_dir, name);
    return b;
}

static const char *write_text(const char *name, const char *text)
{
    const char *p = tmp_path(name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return p;
}

#endif
