/* Expanding inputs into FASTA file paths (see inputs.h). */
#include "inputs.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdint.h>
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
    for (size_t i = 0; i < list->n_dirs; i++)
        free(list->dir_names[i]);
    free(list->paths);
    free(list->dir_names);
    free(list->seen);
    memset(list, 0, sizeof *list);
}

static int grow(char ***names, size_t n, size_t *cap, moe_err *e)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? 2 * *cap : 64;
    char **p = realloc(*names, c * sizeof *p);
    if (!p)
        return moe_errf(e, "out of memory for %zu input paths", c);
    *names = p;
    *cap = c;
    return 0;
}

/* Append a name, with no identity check (a directory's entries before
 * sorting). */
static int push_name(moe_path_list *list, const char *path, moe_err *e)
{
    if (grow(&list->paths, list->n, &list->cap, e) < 0)
        return -1;
    if (!(list->paths[list->n] = strdup(path)))
        return moe_errf(e, "out of memory for input paths");
    list->n++;
    return 0;
}

static size_t seen_slot(const moe_path_list *list, dev_t dev, ino_t ino)
{
    uint64_t h = ((uint64_t)dev * 0x9e3779b97f4a7c15ull) ^ (uint64_t)ino;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    size_t i = (size_t)h & (list->seen_cap - 1);
    while (list->seen[i].used && (list->seen[i].dev != dev || list->seen[i].ino != ino))
        i = (i + 1) & (list->seen_cap - 1);
    return i;
}

/* The name st's file or directory was first taken under, if it was; else
 * NULL, and st is recorded as taken, its name at index `first`. */
static const char *seen_before(moe_path_list *list, const struct stat *st, int is_dir,
                               size_t first, moe_err *e, int *failed)
{
    *failed = 0;
    if (2 * (list->n_seen + 1) > list->seen_cap) {
        size_t cap = list->seen_cap ? 2 * list->seen_cap : 256;
        moe_seen_entry *old = list->seen, *grown = calloc(cap, sizeof *grown);
        if (!grown) {
            *failed = 1;
            moe_errf(e, "out of memory for %zu input paths", cap);
            return NULL;
        }
        size_t old_cap = list->seen_cap;
        list->seen = grown;
        list->seen_cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].used)
                list->seen[seen_slot(list, old[i].dev, old[i].ino)] = old[i];
        free(old);
    }
    size_t i = seen_slot(list, st->st_dev, st->st_ino);
    const moe_seen_entry *s = &list->seen[i];
    if (s->used)
        return s->is_dir ? list->dir_names[s->first] : list->paths[s->first];
    list->seen[i] = (moe_seen_entry){st->st_dev, st->st_ino, first, is_dir, 1};
    list->n_seen++;
    return NULL;
}

/* Append a file, unless another name of it is in the list already. */
static int push(moe_path_list *list, const char *path, const struct stat *st, moe_err *e)
{
    int failed;
    list->n_named++;
    const char *prev = seen_before(list, st, 0, list->n, e, &failed);
    if (failed)
        return -1;
    if (prev && !strcmp(prev, path))
        fprintf(stderr, "%s: warning: %s is named more than once: read once\n",
                program_invocation_short_name, path);
    else if (prev)
        fprintf(stderr, "%s: warning: %s is the same file as %s (a link?): read once\n",
                program_invocation_short_name, path, prev);
    if (prev)
        return 0;
    return push_name(list, path, e);
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

/* The directories from an input down to the one being scanned. */
typedef struct dir_frame {
    dev_t dev;
    ino_t ino;
    const char *path;
    const struct dir_frame *up;
} dir_frame;

static int scan_dir(moe_path_list *list, const char *dir, const dir_frame *frame, moe_err *e);

/* Scan dir unless it is one of the directories above it (a symlink loop)
 * or was scanned already under another name. */
static int enter_dir(moe_path_list *list, const char *dir, const struct stat *st,
                     const dir_frame *up, moe_err *e)
{
    for (const dir_frame *f = up; f; f = f->up)
        if (f->dev == st->st_dev && f->ino == st->st_ino) {
            fprintf(stderr, "%s: warning: %s leads back to %s (a symlink loop): not followed\n",
                    program_invocation_short_name, dir, f->path);
            return 0;
        }
    int failed;
    const char *prev = seen_before(list, st, 1, list->n_dirs, e, &failed);
    if (failed)
        return -1;
    if (prev) {
        fprintf(stderr, "%s: warning: %s is the same directory as %s (a link?): read once\n",
                program_invocation_short_name, dir, prev);
        return 0;
    }
    if (grow(&list->dir_names, list->n_dirs, &list->dirs_cap, e) < 0)
        return -1;
    if (!(list->dir_names[list->n_dirs] = strdup(dir)))
        return moe_errf(e, "out of memory scanning %s", dir);
    list->n_dirs++;
    dir_frame frame = {st->st_dev, st->st_ino, dir, up};
    return scan_dir(list, dir, &frame, e);
}

/* Every FASTA file under dir, sorted by path; hidden entries skipped. */
static int scan_dir(moe_path_list *list, const char *dir, const dir_frame *frame, moe_err *e)
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
            rc = push_name(&here, path, e);
        free(path);
    }
    closedir(d);
    if (here.n)
        qsort(here.paths, here.n, sizeof *here.paths, cmp_str);
    for (size_t i = 0; !rc && i < here.n; i++) {
        struct stat st;
        if (stat(here.paths[i], &st) != 0)
            continue; /* gone since the listing */
        rc = S_ISDIR(st.st_mode) ? enter_dir(list, here.paths[i], &st, frame, e)
                                 : push(list, here.paths[i], &st, e);
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
        return S_ISDIR(st.st_mode) ? enter_dir(list, input, &st, NULL, e) : push(list, input, &st, e);
    if (strpbrk(input, "*?["))
        return expand_glob(list, input, depth, e);
    return moe_err_errno(e, errno, "%s: cannot open FASTA file", input);
}

int inputs_expand(moe_path_list *list, const char *input, const char *fallback_dir, moe_err *e)
{
    size_t before = list->n_named;
    if (expand(list, input, fallback_dir, 0, e) < 0)
        return -1;
    if (list->n_named == before)
        return moe_errf(e, "'%s': no FASTA files (directories are searched for .fa, .fasta, .fna, "
                        ".ffn, .frn, .fas, each optionally .gz)", input);
    return 0;
}
