/* Expanding inputs into FASTA file paths (see inputs.h). */
#include "inputs.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define LIST_DEPTH_MAX 8 /* @lists naming @lists */

static int expand(moe_path_list *list, const char *input, const char *fallback_dir, int depth,
                  moe_err *e);

void path_list_free(moe_path_list *list)
{
    for (size_t i = 0; i < list->n; i++)
        free(list->paths[i]);
    free(list->paths);
    memset(list, 0, sizeof *list);
}

static int push(moe_path_list *list, const char *path, moe_err *e)
{
    if (list->n == list->cap) {
        size_t cap = list->cap ? 2 * list->cap : 64;
        char **p = realloc(list->paths, cap * sizeof *p);
        if (!p)
            return moe_errf(e, "out of memory for %zu input paths", cap);
        list->paths = p;
        list->cap = cap;
    }
    if (!(list->paths[list->n] = strdup(path)))
        return moe_errf(e, "out of memory for input paths");
    list->n++;
    return 0;
}

int inputs_is_fasta_name(const char *name)
{
    static const char *const ext[] = {".fa", ".fasta", ".fna", ".ffn", ".frn", ".fas", NULL};
    size_t n = strlen(name);
    if (n > 3 && !strcasecmp(name + n - 3, ".gz"))
        n -= 3;
    for (int i = 0; ext[i]; i++) {
        size_t k = strlen(ext[i]);
        if (n > k && !strncasecmp(name + n - k, ext[i], k))
            return 1;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every FASTA file under dir, sorted by path; hidden entries skipped. */
static int scan_dir(moe_path_list *list, const char *dir, moe_err *e)
{
    DIR *d = opendir(dir);
    if (!d)
        return moe_err_errno(e, errno, "%s: cannot read directory", dir);
    moe_path_list here = {0};
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char *path;
        size_t dl = strlen(dir);
        if (asprintf(&path, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", de->d_name) < 0) {
            rc = moe_errf(e, "out of memory scanning %s", dir);
            break;
        }
        struct stat st;
        if (stat(path, &st) == 0 && (S_ISDIR(st.st_mode) ||
                                      (S_ISREG(st.st_mode) && inputs_is_fasta_name(de->d_name))))
            rc = push(&here, path, e);
        free(path);
    }
    closedir(d);
    if (here.n)
        qsort(here.paths, here.n, sizeof *here.paths, cmp_str);
    for (size_t i = 0; !rc && i < here.n; i++) {
        struct stat st;
        if (stat(here.paths[i], &st) == 0 && S_ISDIR(st.st_mode))
            rc = scan_dir(list, here.paths[i], e);
        else
            rc = push(list, here.paths[i], e);
    }
    path_list_free(&here);
    return rc;
}

static int read_list(moe_path_list *list, const char *file, const char *fallback_dir, int depth,
                     moe_err *e)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return moe_err_errno(e, errno, "list file %s", file);
    const char *slash = strrchr(file, '/');
    int dir_len = slash ? (int)(slash - file) : 0;
    char *line = NULL, *entry = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    while (!rc && getline(&line, &cap, f) >= 0) {
        lineno++;
        char *p = line + strspn(line, " \t");
        p[strcspn(p, "#\r\n")] = '\0';
        for (size_t n = strlen(p); n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'); n--)
            p[n - 1] = '\0';
        if (!*p)
            continue;
        int at = *p == '@';
        if (p[at] != '/' && slash)
            rc = asprintf(&entry, "%s%.*s/%s", at ? "@" : "", dir_len, file, p + at) < 0;
        else
            rc = !(entry = strdup(p));
        if (rc) {
            rc = moe_errf(e, "out of memory reading %s", file);
            break;
        }
        rc = expand(list, entry, NULL, depth + 1, e);
        if (rc)
            moe_err_prefix(e, "%s:%d", file, lineno);
        free(entry);
    }
    free(line);
    fclose(f);
    return rc;
}

static int expand_glob(moe_path_list *list, const char *pattern, int depth, moe_err *e)
{
    glob_t g;
    int r = glob(pattern, 0, NULL, &g);
    if (r == GLOB_NOMATCH)
        return moe_errf(e, "'%s': no file matches", pattern);
    if (r != 0)
        return moe_errf(e, "'%s': cannot expand the pattern", pattern);
    int rc = 0;
    for (size_t i = 0; !rc && i < g.gl_pathc; i++)
        rc = expand(list, g.gl_pathv[i], NULL, depth, e);
    globfree(&g);
    return rc;
}

/* Whether input names anything relative to the current directory. */
static int exists_here(const char *input)
{
    struct stat st;
    const char *path = input[0] == '@' ? input + 1 : input;
    if (stat(path, &st) == 0)
        return 1;
    if (!strpbrk(path, "*?["))
        return 0;
    glob_t g;
    int found = glob(path, 0, NULL, &g) == 0;
    if (found)
        globfree(&g);
    return found;
}

static int expand(moe_path_list *list, const char *input, const char *fallback_dir, int depth,
                  moe_err *e)
{
    if (!input[0] || (input[0] == '@' && !input[1]))
        return moe_errf(e, "an empty input name");
    if (depth > LIST_DEPTH_MAX)
        return moe_errf(e, "'%s': @lists nested more than %d deep (a list naming itself?)", input,
                        LIST_DEPTH_MAX);
    if (fallback_dir && input[input[0] == '@'] != '/' && !exists_here(input)) {
        char *alt;
        int at = input[0] == '@';
        if (asprintf(&alt, "%s%s/%s", at ? "@" : "", fallback_dir, input + at) < 0)
            return moe_errf(e, "out of memory");
        int rc = exists_here(alt) ? expand(list, alt, NULL, depth, e)
                                  : moe_errf(e, "'%s': not found (looked in the current directory "
                                             "and in %s)", input, fallback_dir);
        free(alt);
        return rc;
    }
    if (input[0] == '@')
        return read_list(list, input + 1, fallback_dir, depth, e);
    struct stat st;
    if (stat(input, &st) == 0)
        return S_ISDIR(st.st_mode) ? scan_dir(list, input, e) : push(list, input, e);
    if (strpbrk(input, "*?["))
        return expand_glob(list, input, depth, e);
    return moe_err_errno(e, errno, "%s: cannot open FASTA file", input);
}

int inputs_expand(moe_path_list *list, const char *input, const char *fallback_dir, moe_err *e)
{
    size_t before = list->n;
    if (expand(list, input, fallback_dir, 0, e) < 0)
        return -1;
    if (list->n == before)
        return moe_errf(e, "'%s': no FASTA files (directories are searched for .fa, .fasta, .fna, "
                        ".ffn, .frn, .fas, each optionally .gz)", input);
    return 0;
}
